//! The supervisor of one exec: limits over time, output forwarding, and the single `Exit` event.
//!
//! Split in three tasks so that a slow consumer of events can never delay a kill: two readers
//! forward output (and feel the consumer's backpressure), while the supervisor itself only waits
//! for the exit status, the wall-time deadline and the CPU budget, and never sends an event until
//! the tree is dead and the cgroup gone.

use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncReadExt, Interest};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::sleep_until;

use crate::cgroup::Stats;
use crate::limits::Limits;
use crate::reaper::ExitInfo;
use crate::run::{Event, Outcome};
use crate::tree::Tree;

/// How long output is still drained after the tree is dead. Only a process that escaped every
/// kill net (possible only without cgroups) can hold a pipe open longer.
const DRAIN_GRACE: Duration = Duration::from_secs(2);
/// The same for an exec that keeps its descendants: one of them may hold a pipe for as long as it
/// runs, and the exec's answer should not wait for it. What they write later is read and dropped.
const DRAIN_GRACE_KEPT: Duration = Duration::from_millis(200);
/// How often a cgroup left to kept descendants is checked for emptiness (then removed).
const LINGER_POLL_MAX: Duration = Duration::from_secs(2);
const READ_CHUNK: usize = 64 * 1024;

pub(crate) struct Supervision {
    pub tree: Arc<Tree>,
    pub exit: oneshot::Receiver<ExitInfo>,
    pub pidfd: Option<OwnedFd>,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
    pub limits: Limits,
    pub started: Instant,
    pub events: mpsc::Sender<Event>,
    /// Started as a fork of the Python zygote (reported in the `Outcome`).
    pub zygote: bool,
}

#[derive(Clone, Copy)]
enum Stream {
    Stdout,
    Stderr,
}

pub(crate) async fn supervise(s: Supervision) {
    let Supervision {
        tree,
        mut exit,
        pidfd,
        stdout,
        stderr,
        limits,
        started,
        events,
        zygote,
    } = s;
    // Without an exec cgroup (e.g. inside a container whose cgroups are read-only) an OOM kill is
    // seen as a rise of the enclosing cgroup's counter while this program ran.
    let oom_before = tree
        .cgroup()
        .is_none()
        .then(crate::cgroup::enclosing_oom_kills)
        .flatten();
    let (drain_tx, drain_rx) = watch::channel(None::<tokio::time::Instant>);
    let reader = |fd, which| {
        tokio::spawn(forward(
            fd,
            which,
            events.clone(),
            limits.clone(),
            tree.clone(),
            drain_rx.clone(),
        ))
    };
    let out_task = reader(stdout, Stream::Stdout);
    let err_task = reader(stderr, Stream::Stderr);

    let deadline = tokio::time::Instant::from_std(started + limits.wall_time);
    let cpu_watch = tree.cgroup().filter(|cg| cg.has_cpu()).cloned();
    let ncpus = cpu_count();
    // The earliest moment the tree can have used its CPU budget: all CPUs busy since the start.
    let mut cpu_check = tokio::time::Instant::from_std(started + limits.cpu_time / ncpus);
    let mut timed_out = false;
    let mut cpu_killed = false;
    // The exit is seen on this thread when the pidfd turns readable; the reaper thread, woken by
    // SIGCHLD, would take two thread wake-ups more to report it. Either one reaps.
    let mut pidfd = pidfd.and_then(|fd| {
        // SAFETY: an `OwnedFd` stays open, and the same file, for as long as the `AsyncFd` has it.
        unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }.ok()
    });
    let status = loop {
        tokio::select! {
            r = &mut exit => break r.ok(),
            ready = async { pidfd.as_ref()?.readable().await.ok() }, if pidfd.is_some() => {
                match ready {
                    Some(mut guard) => {
                        if let Some(info) = tree.reaper().try_reap(tree.pid(), &mut exit) {
                            break Some(info);
                        }
                        guard.clear_ready();
                    }
                    None => pidfd = None,
                }
            }
            _ = sleep_until(deadline), if !timed_out => {
                timed_out = true;
                tree.kill();
            }
            _ = sleep_until(cpu_check), if cpu_watch.is_some() && !cpu_killed => {
                let used = cpu_watch.as_ref().and_then(|cg| cg.cpu_usage()).unwrap_or_default();
                if used >= limits.cpu_time {
                    cpu_killed = true;
                    tree.kill();
                } else {
                    let wait = ((limits.cpu_time - used) / ncpus).max(Duration::from_millis(10));
                    cpu_check = tokio::time::Instant::now() + wait;
                }
            }
        }
    };
    let wall_time = started.elapsed();
    drop(pidfd);

    // The main process is gone: so is the exec. Kill what is left (unless it is kept), then
    // account and clean up.
    tree.main_exited();
    tree.kill();
    let mut stats = Stats::default();
    // A cgroup that still holds kept descendants stays until they are gone.
    let lingering = tree.keeps_descendants() && tree.cgroup().is_some_and(|cg| !cg.is_empty());
    if lingering {
        if let Some(cg) = tree.cgroup() {
            stats = cg.stats();
            tokio::spawn(linger(cg.clone()));
        }
    } else if let Some(cg) = tree.cgroup() {
        if !cg.kill_until_empty().await {
            tracing::warn!(dirs = ?cg.dirs(), "processes survive in the exec cgroup");
        }
        stats = cg.stats();
        // A pooled cgroup is handed back after the exit event (below), off the caller's path.
        if !cg.is_pooled() {
            remove_cgroup(cg).await;
        }
    } else if let (Some(before), Some(after)) = (oom_before, crate::cgroup::enclosing_oom_kills()) {
        stats.oom_kills = after.saturating_sub(before);
    }
    let grace = if tree.keeps_descendants() {
        DRAIN_GRACE_KEPT
    } else {
        DRAIN_GRACE
    };
    let _ = drain_tx.send(Some(tokio::time::Instant::now() + grace));
    let stdout_truncated = out_task.await.unwrap_or(false);
    let stderr_truncated = err_task.await.unwrap_or(false);
    tree.finish();

    let mut outcome = outcome(
        status,
        &stats,
        &limits,
        wall_time,
        timed_out,
        cpu_killed,
        stdout_truncated,
        stderr_truncated,
    );
    outcome.zygote = zygote;
    tracing::debug!(?outcome, "exec finished");
    // A dropped receiver (caller went away) is fine: everything is cleaned up already (or, for a
    // pooled cgroup, empty, and about to be recycled or removed).
    let _ = events.send(Event::Exit(outcome)).await;
    if let Some(cg) = tree.cgroup().filter(|cg| cg.is_pooled() && !lingering) {
        // Let the consumer of the exit event (on this thread, with a current-thread runtime) go
        // first: the reset is not needed before the next exec starts.
        tokio::task::yield_now().await;
        if !cg.recycle(&stats) {
            remove_cgroup(cg).await;
        }
    }
}

/// Waits for the kept descendants in `cg` to end, then removes it (ends with the agent otherwise).
async fn linger(cg: Arc<crate::cgroup::ExecCgroup>) {
    let mut delay = Duration::from_millis(50);
    while !cg.is_empty() {
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(LINGER_POLL_MAX);
    }
    remove_cgroup(&cg).await;
}

async fn remove_cgroup(cg: &crate::cgroup::ExecCgroup) {
    if let Err(e) = cg.remove_retrying().await {
        tracing::warn!(dirs = ?cg.dirs(), error = %e, "cannot remove the exec cgroup");
    }
}

/// CPUs the tree can run on at once. Cached: `available_parallelism` reads cgroup files each call.
fn cpu_count() -> u32 {
    static N: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *N.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get() as u32))
}

#[allow(clippy::too_many_arguments)]
fn outcome(
    status: Option<ExitInfo>,
    stats: &Stats,
    limits: &Limits,
    wall_time: Duration,
    timed_out: bool,
    cpu_killed: bool,
    stdout_truncated: bool,
    stderr_truncated: bool,
) -> Outcome {
    let exit_code = status.and_then(|s| s.exit_code());
    let signal = status.and_then(|s| s.signal());
    let rusage_cpu = status
        .map(|s| timeval(s.rusage.ru_utime) + timeval(s.rusage.ru_stime))
        .unwrap_or_default();
    // rusage covers the main process (and children it waited for); the cgroup covers everything.
    let cpu_time = stats.cpu_usage.unwrap_or(rusage_cpu).max(rusage_cpu);
    let killed = signal == Some(libc::SIGKILL);
    let peak_memory_bytes = stats.peak_memory_bytes.unwrap_or_else(|| {
        status
            .map(|s| s.rusage.ru_maxrss.max(0) as u64 * 1024)
            .unwrap_or(0)
    });
    Outcome {
        exit_code,
        signal,
        stdout: Vec::new(),
        stderr: Vec::new(),
        stdout_truncated,
        stderr_truncated,
        timed_out,
        // A child of the program may be the one the kernel picked: count it when the program failed.
        oom_killed: stats.oom_kills > 0 && (killed || exit_code != Some(0)),
        cpu_limited: cpu_killed
            || signal == Some(libc::SIGXCPU)
            || (killed && cpu_time >= limits.cpu_time),
        pids_limited: stats.pids_max_events > 0,
        file_size_limited: signal == Some(libc::SIGXFSZ),
        wall_time,
        cpu_time,
        peak_memory_bytes,
        zygote: false,
    }
}

fn timeval(t: libc::timeval) -> Duration {
    Duration::from_secs(t.tv_sec.max(0) as u64) + Duration::from_micros(t.tv_usec.max(0) as u64)
}

/// Forwards one pipe as events, up to the output cap; past it, keeps reading (so the program never
/// blocks on a full pipe) and only counts. Returns whether output was truncated.
async fn forward(
    fd: OwnedFd,
    which: Stream,
    events: mpsc::Sender<Event>,
    limits: Limits,
    tree: Arc<Tree>,
    mut drain: watch::Receiver<Option<tokio::time::Instant>>,
) -> bool {
    // The read end of a pipe made non-blocking by `spawn`: nothing left to check or set.
    let mut pipe = match tokio::net::unix::pipe::Receiver::from_owned_fd_unchecked(fd) {
        Ok(p) => p,
        Err(e) => {
            tracing::error!(error = %e, "cannot watch an output pipe");
            return false;
        }
    };
    let cap = limits.max_output_bytes;
    let mut forwarded: u64 = 0;
    let mut truncated = false;
    let mut consumer_gone = false;
    // Read into spare capacity (`read_buf`): no chunk is zeroed first, and a page of it is
    // touched only when output fills it.
    let mut buf: Vec<u8> = Vec::with_capacity(READ_CHUNK);
    loop {
        buf.clear();
        let drain_at = *drain.borrow();
        let n = tokio::select! {
            biased;
            r = pipe.read_buf(&mut buf) => match r {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            },
            _ = sleep_until(drain_at.unwrap_or_else(tokio::time::Instant::now)), if drain_at.is_some() => {
                if tree.keeps_descendants() {
                    // A kept descendant still holds the pipe: read it to its end, unseen, so
                    // that its writes never fail.
                    tokio::spawn(discard(pipe));
                }
                break;
            }
            r = drain.changed(), if drain_at.is_none() => {
                if r.is_err() {
                    break;
                }
                continue;
            }
        };
        let room = cap.saturating_sub(forwarded);
        let take = (n as u64).min(room) as usize;
        if take > 0 && !consumer_gone {
            let chunk = Bytes::copy_from_slice(&buf[..take]);
            let event = match which {
                Stream::Stdout => Event::Stdout(chunk),
                Stream::Stderr => Event::Stderr(chunk),
            };
            consumer_gone = events.send(event).await.is_err();
        }
        forwarded += take as u64;
        if take < n && !truncated {
            truncated = true;
            if limits.kill_on_output_limit {
                tree.kill();
            }
        }
    }
    truncated
}

async fn discard(mut pipe: tokio::net::unix::pipe::Receiver) {
    let mut buf: Vec<u8> = Vec::with_capacity(READ_CHUNK);
    loop {
        buf.clear();
        match pipe.read_buf(&mut buf).await {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}
