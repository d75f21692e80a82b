//! The Python fast path: a prewarmed interpreter (the "zygote", `zygote.py`) per executor that
//! forks one worker per Python execution, so no execution pays for interpreter start-up.
//!
//! The zygote is itself started like any program (sandbox uid, `no_new_privs`, seccomp, rlimits,
//! its own cgroup, its own session), with its end of a `SOCK_SEQPACKET` socket pair as fd 3 and
//! long limits. Its workers inherit all of that. Per execution the agent sends one request (JSON +
//! the worker's stdin/stdout/stderr and a `go` pipe as SCM_RIGHTS); the zygote makes the worker a
//! child of the agent (one `clone(CLONE_PARENT)` where verified, else a double fork that reparents
//! it to the agent, a child subreaper); the worker calls `setsid`, sets the
//! exec's rlimits and waits on `go`. Meanwhile the agent adopts it in the reaper, moves it into the
//! exec's own cgroup and only then lets it run user code. From there on it is supervised exactly
//! like a spawned program (timeouts, output caps, tree kill, cgroup stats).
//!
//! Started by the second Python execution (or eagerly, see `Executor::enable_python_zygote`) and
//! restarted by the next one when it died: the first is spawned, so a sandbox that runs Python
//! once (a sandbox per RL rollout) pays nothing for the zygote's start-up, which costs more CPU
//! than one spawned interpreter (`python -m bench rollouts`). Nobody waits for it to start: it
//! loads its modules in the background and says `{"ready":true}` on its socket when done; until
//! then, and whenever it cannot serve a request, a Python execution is spawned like any other
//! program. Where zygotes are made from a template's (`template.rs`), the first Python execution
//! is a process the template makes that runs it in place of serving, and the second takes a
//! zygote.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fmt::Write as _;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::error::{SpawnError, Step};
use crate::reaper::{Child, Reaper};
use crate::run::{Event, Running};
use crate::spawn::{Isolation, Prepared, Spawned};

/// The zygote program, run as `python3 -I -c SOURCE`.
pub(crate) const SOURCE: &str = include_str!("zygote.py");

/// How long a request may wait for the zygote's answer (covers its own start-up on first use).
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

pub(crate) struct Zygote {
    /// The interpreter as configured (e.g. /usr/bin/python3) and its canonical path, which an
    /// exec's resolved program must match to take the fast path.
    pub(crate) python: PathBuf,
    canonical: PathBuf,
    /// Python source run in the zygote before it serves (its functions are `Command::zygote_entry`s).
    pub(crate) prelude: &'static str,
    live: Mutex<Option<Live>>,
    /// Set by the first Python execution, which is spawned without starting the zygote: a
    /// sandbox that runs Python once (one grading per sandbox, as RL rollouts do) never pays for
    /// it; the second one starts it.
    asked: AtomicBool,
    /// Zygotes are made from a template's (`template.rs`): cheap, and ready at once, so an
    /// execution waits for one instead of being spawned.
    from_template: AtomicBool,
    /// Set once the template made the first Python execution's process, which runs it in place
    /// of serving as a zygote (see `first_run_in_place`).
    placed: AtomicBool,
}

/// A running zygote.
struct Live {
    ctl: OwnedFd,
    /// Set once it said it is ready (its start-up imports are done).
    ready: bool,
    /// Set once its supervisor reported its exit.
    dead: Arc<AtomicBool>,
    /// Its exec; dropping it kills the zygote (and its supervisor removes its cgroup).
    running: Running,
}

/// What a Python command asks for, when it has the shape the zygote can run.
#[derive(Debug)]
pub(crate) struct Request {
    code: Option<String>,
    path: Option<String>,
    entry: Option<&'static str>,
    args: Vec<String>,
    isolated: bool,
    unbuffered: bool,
    no_bytecode: bool,
    cwd: String,
    env: EnvChanges,
}

/// The exec's environment as changes to the zygote's own: the variables to set (new or with
/// another value) and the names to remove. A worker applies them to the environment it inherited
/// instead of walking and rewriting all of it (every page of the inherited heap it touches is
/// copied for it).
#[derive(Debug)]
struct EnvChanges {
    set: Vec<(String, String)>,
    unset: Vec<String>,
}

/// Why a request was not served.
enum Failure {
    /// The zygote is broken (gone, hung, protocol error): restart it.
    Transport(io::Error),
    /// The zygote answered with an error (e.g. fork refused): fall back to a spawn.
    Refused(String),
    /// A step of the exec itself failed (the worker is gone again).
    Exec(SpawnError),
}

impl Zygote {
    /// `None` if `python` is not an executable file.
    pub(crate) fn new(python: PathBuf, prelude: &'static str) -> Option<Zygote> {
        let canonical = std::fs::canonicalize(&python).ok()?;
        let meta = std::fs::metadata(&canonical).ok()?;
        use std::os::unix::fs::PermissionsExt;
        if !meta.is_file() || meta.permissions().mode() & 0o111 == 0 {
            return None;
        }
        Some(Zygote {
            python,
            canonical,
            prelude,
            live: Mutex::new(None),
            asked: AtomicBool::new(false),
            from_template: AtomicBool::new(false),
            placed: AtomicBool::new(false),
        })
    }

    /// From now on zygotes are made from a template's (the executor makes them so).
    pub(crate) fn made_from_template(&self) {
        self.from_template.store(true, Ordering::Release);
        self.asked.store(true, Ordering::Release);
    }

    /// Whether this Python execution, the first, is to be made by the template as a process that
    /// runs it in place of serving as a zygote: one fork and one exit of the interpreter fewer
    /// than a zygote and its worker, for a sandbox that runs Python once (a sandbox per RL
    /// rollout, graded once). The second execution takes a zygote. True once at most.
    pub(crate) fn first_run_in_place(&self) -> bool {
        self.from_template.load(Ordering::Acquire)
            && !self.is_running()
            && !self.placed.swap(true, Ordering::AcqRel)
    }

    /// Whether a zygote process is up now.
    pub(crate) fn is_running(&self) -> bool {
        self.lock()
            .as_ref()
            .is_some_and(|l| !l.dead.load(Ordering::Acquire))
    }

    /// Starts the zygote now if it is not running.
    pub(crate) fn warm(&self, start: &dyn Fn(RawFd) -> Result<Running, SpawnError>) {
        let mut live = self.lock();
        if live
            .as_ref()
            .is_some_and(|l| !l.dead.load(Ordering::Acquire))
        {
            return;
        }
        match start_live(start) {
            Ok(l) => *live = Some(l),
            Err(e) => tracing::warn!(error = %e, "cannot start the python zygote"),
        }
    }

    /// Whether the zygote is up and has said it is ready (does not wait).
    pub(crate) fn is_ready(&self) -> bool {
        let mut live = self.lock();
        match live.as_mut() {
            Some(l) if !l.dead.load(Ordering::Acquire) => poll_ready(l).unwrap_or(false),
            _ => false,
        }
    }

    /// Pid of the zygote process, while it is up.
    pub(crate) fn pid(&self) -> Option<u32> {
        self.lock()
            .as_ref()
            .filter(|l| !l.dead.load(Ordering::Acquire))
            .map(|l| l.running.pid)
    }

    /// Kills the zygote (it is started again on the next Python execution).
    pub(crate) fn stop(&self) {
        let old = self.lock().take();
        drop(old);
    }

    /// Kills the zygote and waits (bounded) until it is reaped, so that its cgroup can be removed
    /// even when no runtime is left to run its supervisor (an executor dropped at shutdown).
    fn stop_and_wait(&self) {
        let Some(live) = self.lock().take() else {
            return;
        };
        let pid = live.running.pid as libc::pid_t;
        live.running.kill();
        if let Ok(reaper) = Reaper::global() {
            for _ in 0..2000 {
                if !reaper.is_registered(pid) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        drop(live);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Live>> {
        self.live.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The fast-path request for `argv`, if it is `python[3[.X]] [-I|-u|-B]... (-c CODE | FILE)
    /// [args...]`, resolves to this zygote's interpreter, and nothing about it (a PYTHON*
    /// variable the interpreter would read, a cwd that is not a directory) needs a real start.
    /// `zygote_env`: the environment the zygote was started with.
    pub(crate) fn plan(
        &self,
        argv: &[String],
        entry: Option<&'static str>,
        prep: &Prepared,
        zygote_env: &BTreeMap<String, String>,
    ) -> Option<Request> {
        let base = Path::new(argv.first()?).file_name()?.to_str()?;
        let named = base == "python"
            || base == "python3"
            || base
                .strip_prefix("python3.")
                .is_some_and(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()));
        if !named {
            return None;
        }
        let program = Path::new(OsStr::from_bytes(prep.program.as_bytes()));
        if std::fs::canonicalize(program).ok()? != self.canonical {
            return None;
        }
        let (mut isolated, mut unbuffered, mut no_bytecode) = (false, false, false);
        let mut i = 1;
        while let Some(a) = argv.get(i) {
            match a.as_str() {
                "-I" => isolated = true,
                "-u" => unbuffered = true,
                "-B" => no_bytecode = true,
                _ => break,
            }
            i += 1;
        }
        let first = argv.get(i)?;
        let (code, path) = if first == "-c" {
            i += 1;
            (Some(argv.get(i)?.clone()), None)
        } else if first.is_empty() || first.starts_with('-') {
            return None;
        } else {
            (None, Some(first.clone()))
        };
        let args = argv[i + 1..].to_vec();
        if !isolated && prep.env.iter().any(|e| e.as_bytes().starts_with(b"PYTHON")) {
            return None;
        }
        let cwd = prep.cwd.to_str().ok()?;
        if !Path::new(cwd).is_dir() {
            return None;
        }
        let env = env_changes(&prep.env, zygote_env)?;
        Some(Request {
            entry: entry.filter(|_| path.is_some()),
            code,
            path,
            args,
            isolated,
            unbuffered,
            no_bytecode,
            cwd: cwd.to_string(),
            env,
        })
    }

    /// Starts `req` as a fork of the zygote (started first with `start` if not running).
    /// `Ok(None)`: the zygote cannot serve it; the caller spawns instead.
    pub(crate) fn fork(
        &self,
        req: &Request,
        rlimits: &[(i32, libc::rlimit)],
        iso: &Isolation<'_>,
        reaper: &Reaper,
        start: &dyn Fn(RawFd) -> Result<Running, SpawnError>,
    ) -> Result<Option<Spawned>, SpawnError> {
        let joins = iso
            .cgroup
            .filter(|cg| cg.joinable_by_self())
            .map_or(0, |cg| cg.dirs().len());
        let json = request_json(req, rlimits, iso.landlock.is_some(), joins);
        // One request at a time per zygote: it serves them in order, each a fork.
        let mut live = self.lock();
        if live.is_none() && !self.asked.swap(true, Ordering::AcqRel) {
            return Ok(None); // the first Python execution: spawned, the zygote not started
        }
        for _attempt in 0..2 {
            if live
                .as_ref()
                .is_some_and(|l| l.dead.load(Ordering::Acquire))
            {
                *live = None;
            }
            if live.is_none() {
                match start_live(start) {
                    Ok(l) => *live = Some(l),
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot start the python zygote; spawning");
                        return Ok(None);
                    }
                }
            }
            let Some(l) = live.as_mut() else {
                return Ok(None);
            };
            let ready = match poll_ready(l) {
                Ok(false) if self.from_template.load(Ordering::Acquire) => wait_ready(l),
                r => r,
            };
            match ready {
                Ok(true) => {}
                Ok(false) => return Ok(None), // still starting: this one is spawned
                Err(e) => {
                    tracing::warn!(error = %e, "the python zygote failed to start; restarting it");
                    *live = None;
                    continue;
                }
            }
            match request(l, &json, iso, reaper) {
                Ok(s) => return Ok(Some(s)),
                Err(Failure::Exec(e)) => return Err(e),
                Err(Failure::Refused(msg)) => {
                    tracing::warn!(%msg, "the python zygote refused a request; spawning");
                    return Ok(None);
                }
                Err(Failure::Transport(e)) => {
                    tracing::warn!(error = %e, "the python zygote failed; restarting it");
                    *live = None;
                }
            }
        }
        Ok(None)
    }
}

impl Drop for Zygote {
    fn drop(&mut self) {
        self.stop_and_wait();
    }
}

fn start_live(start: &dyn Fn(RawFd) -> Result<Running, SpawnError>) -> io::Result<Live> {
    let (ours, theirs) = socketpair()?;
    let theirs = crate::fds::at_least(theirs, 4)?;
    set_timeouts(&ours)?;
    let mut running = start(theirs.as_raw_fd()).map_err(io::Error::other)?;
    drop(theirs);
    // EOF on its stdin; its output (normally none) goes to the log.
    drop(running.stdin.take());
    let (_, closed) = tokio::sync::mpsc::channel(1);
    let mut events = std::mem::replace(&mut running.events, closed);
    let dead = Arc::new(AtomicBool::new(false));
    let flag = dead.clone();
    let pid = running.pid;
    tokio::spawn(async move {
        while let Some(ev) = events.recv().await {
            match ev {
                Event::Stdout(b) | Event::Stderr(b) => {
                    tracing::warn!(pid, output = %String::from_utf8_lossy(&b), "python zygote output")
                }
                Event::Exit(o) => {
                    tracing::info!(pid, exit_code = ?o.exit_code, signal = ?o.signal, "python zygote exited");
                    break;
                }
            }
        }
        flag.store(true, Ordering::Release);
    });
    tracing::info!(pid, "python zygote started");
    Ok(Live {
        ctl: ours,
        ready: false,
        dead,
        running,
    })
}

/// Sends and receives on `sock` give up after `REPLY_TIMEOUT`.
pub(crate) fn set_timeouts(sock: &OwnedFd) -> io::Result<()> {
    let timeout = libc::timeval {
        tv_sec: REPLY_TIMEOUT.as_secs() as libc::time_t,
        tv_usec: 0,
    };
    for opt in [libc::SO_RCVTIMEO, libc::SO_SNDTIMEO] {
        // SAFETY: plain syscall on our own socket with a valid option value.
        let r = unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&timeout as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Whether the zygote has said it is ready, without waiting for it.
fn poll_ready(live: &mut Live) -> io::Result<bool> {
    if live.ready {
        return Ok(true);
    }
    let mut buf = [0u8; 64];
    let n = match recv(&live.ctl, &mut buf, libc::MSG_DONTWAIT) {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
        r => r?,
    };
    if &buf[..n] != READY {
        return Err(io::Error::other(format!(
            "expected the ready message, got {:?}",
            String::from_utf8_lossy(&buf[..n])
        )));
    }
    live.ready = true;
    Ok(true)
}

/// Waits (up to `REPLY_TIMEOUT`) for the zygote to say it is ready.
fn wait_ready(live: &mut Live) -> io::Result<bool> {
    let reply = recv_text(&live.ctl, 0)?;
    if reply.as_bytes() != READY {
        return Err(io::Error::other(format!(
            "expected the ready message, got {reply:?}"
        )));
    }
    live.ready = true;
    Ok(true)
}

/// One datagram from the zygote; its end of the socket closing is an error.
fn recv(sock: &OwnedFd, buf: &mut [u8], flags: libc::c_int) -> io::Result<usize> {
    loop {
        // SAFETY: plain syscall into a buffer we own.
        let n = unsafe { libc::recv(sock.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), flags) };
        if n > 0 {
            return Ok(n as usize);
        }
        if n == 0 {
            return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// What the zygote says once its start-up is done.
const READY: &[u8] = b"{\"ready\":true}";

/// One request: pipes, send (with the exec's Landlock ruleset, which the worker enforces), adopt
/// the worker, move it into the exec's cgroup, release it.
fn request(
    live: &Live,
    json: &str,
    iso: &Isolation<'_>,
    reaper: &Reaper,
) -> Result<Spawned, Failure> {
    use crate::spawn::{nonblocking, pipe};
    let exec_err = |step| move |source| Failure::Exec(SpawnError::Isolation { step, source });
    let (stdin_r, stdin_w) = pipe().map_err(exec_err(Step::Pipe))?;
    let (stdout_r, stdout_w) = pipe().map_err(exec_err(Step::Pipe))?;
    let (stderr_r, stderr_w) = pipe().map_err(exec_err(Step::Pipe))?;
    let (go_r, go_w) = pipe().map_err(exec_err(Step::Pipe))?;
    nonblocking(&stdout_r).map_err(exec_err(Step::Pipe))?;
    nonblocking(&stderr_r).map_err(exec_err(Step::Pipe))?;

    // Programs share the zygote's uid and may have stopped it (SIGSTOP): resume it, or this
    // request would wait for its reply until the deadline.
    let _ = live.running.signal(libc::SIGCONT);
    // The worker joins its cgroup itself where it can (see zygote.py), through these files.
    let (self_join, agent_join) = match iso.cgroup {
        Some(cg) if cg.joinable_by_self() => (Some(cg), None),
        cg => (None, cg),
    };
    let joins = self_join
        .map(|cg| cg.join_files())
        .transpose()
        .map_err(Failure::Exec)?;
    // From here until the worker is registered, the reaper must not reap it as an orphan.
    let adoption = reaper.begin_adopt();
    let mut fds = vec![
        stdin_r.as_raw_fd(),
        stdout_w.as_raw_fd(),
        stderr_w.as_raw_fd(),
        go_r.as_raw_fd(),
    ];
    fds.extend(iso.landlock);
    fds.extend(joins.as_ref().map_or(&[][..], |j| j.raw()));
    send_with_fds(&live.ctl, json.as_bytes(), &fds).map_err(Failure::Transport)?;
    drop((stdin_r, stdout_w, stderr_w, go_r, joins));
    // Two reports, in either order: the zygote's (the pid, or why there is no worker) and, once
    // forked, the worker's (decoded and joined, or why not).
    let mut worker: Option<String> = None;
    let pid = loop {
        let reply = recv_text(&live.ctl, 0).map_err(Failure::Transport)?;
        if let Some(pid) = parse_pid(&reply) {
            break pid;
        }
        if is_worker_report(&reply) && worker.is_none() {
            worker = Some(reply);
        } else if reply.contains("\"error\"") && worker.is_none() {
            return Err(Failure::Refused(reply));
        } else {
            return Err(Failure::Transport(io::Error::other(format!(
                "bad reply {reply:?}"
            ))));
        }
    };
    // The worker's parent exited before the reply: it is our child now (alive, blocked on `go`).
    let child = adoption.adopt(pid).map_err(Failure::Transport)?;
    if let Some(cg) = agent_join {
        let joined = cg.join_files().and_then(|files| {
            let text = pid.to_string();
            for &fd in files.raw() {
                // SAFETY: plain syscall with a buffer we own.
                let r = unsafe { libc::write(fd, text.as_ptr().cast(), text.len()) };
                if r != text.len() as isize {
                    return Err(SpawnError::Isolation {
                        step: Step::JoinCgroup,
                        source: io::Error::last_os_error(),
                    });
                }
            }
            Ok(())
        });
        if let Err(e) = joined {
            return Err(abandon(child, Failure::Exec(e), reaper));
        }
    }
    let child = accept_worker(&live.ctl, child, worker, go_w, reaper)?;
    Ok(Spawned::of(child, stdin_w, stdout_r, stderr_r, None))
}

/// Kills and reaps a worker that will not run; `failure` is why.
fn abandon(child: Child, failure: Failure, reaper: &Reaper) -> Failure {
    let _ = reaper.signal_pid(child.pid, libc::SIGKILL);
    drop(child.pidfd);
    let _ = reaper.reap_blocking(child.pid, child.exit);
    failure
}

/// The worker `child`, released to run (one byte on `go`) once its report (`early` if it came
/// already, else read from `ctl`) says it decoded its request and joined its cgroup; otherwise it
/// is killed and reaped and the failure says why.
fn accept_worker(
    ctl: &OwnedFd,
    child: Child,
    early: Option<String>,
    go: OwnedFd,
    reaper: &Reaper,
) -> Result<Child, Failure> {
    let report = match early {
        Some(r) => Some(r),
        None => match worker_report(ctl, child.pidfd.as_ref()) {
            Ok(r) => r,
            Err(e) => return Err(abandon(child, Failure::Transport(e), reaper)),
        },
    };
    let failure = match report {
        Some(r) if r.contains("\"worker_ok\"") => {
            // SAFETY: plain syscall; a 1-byte write to a fresh pipe never blocks. If the worker
            // is gone already (EPIPE) the supervisor sees its exit.
            unsafe { libc::write(go.as_raw_fd(), b"G".as_ptr().cast(), 1) };
            return Ok(child);
        }
        Some(r) if r.contains("\"join_error\"") => Failure::Exec(SpawnError::Isolation {
            step: Step::JoinCgroup,
            source: io::Error::other(r),
        }),
        Some(r) if r.contains("\"worker_error\"") => Failure::Refused(r),
        Some(r) => Failure::Transport(io::Error::other(format!("bad worker report {r:?}"))),
        // Killed before it reported (only a program of this sandbox can do that): spawn instead.
        None => Failure::Refused("the worker ended before it reported".to_string()),
    };
    Err(abandon(child, failure, reaper))
}

/// A program made in place of a zygote (see `template.rs`): `child` released on `go` once it
/// reported like a worker on `ctl`, else killed and reaped, with why.
pub(crate) fn accept_program(
    ctl: &OwnedFd,
    child: Child,
    go: OwnedFd,
    reaper: &Reaper,
) -> Result<Child, SpawnError> {
    accept_worker(ctl, child, None, go, reaper).map_err(|f| match f {
        Failure::Exec(e) => e,
        Failure::Refused(why) => SpawnError::Isolation {
            step: Step::Fork,
            source: io::Error::other(why),
        },
        Failure::Transport(source) => SpawnError::Isolation {
            step: Step::Fork,
            source,
        },
    })
}

/// One datagram from the zygote or a worker, as text.
pub(crate) fn recv_text(sock: &OwnedFd, flags: libc::c_int) -> io::Result<String> {
    let mut buf = [0u8; 4096];
    let n = recv(sock, &mut buf, flags)?;
    Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
}

fn is_worker_report(reply: &str) -> bool {
    ["\"worker_ok\"", "\"worker_error\"", "\"join_error\""]
        .iter()
        .any(|k| reply.contains(k))
}

/// The worker's report, waited for until it comes (`Some`) or the worker is gone without one
/// (`None`, seen through its pidfd; without one, until the reply deadline).
fn worker_report(ctl: &OwnedFd, pidfd: Option<&OwnedFd>) -> io::Result<Option<String>> {
    let Some(pidfd) = pidfd else {
        return recv_text(ctl, 0).map(Some);
    };
    let mut fds = [
        libc::pollfd {
            fd: ctl.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: pidfd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    let deadline = std::time::Instant::now() + REPLY_TIMEOUT;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(io::Error::from(io::ErrorKind::TimedOut));
        }
        // SAFETY: plain syscall on two pollfds we own.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, left.as_millis().max(1) as libc::c_int) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if fds[0].revents != 0 {
            return recv_text(ctl, 0).map(Some);
        }
        if fds[1].revents != 0 {
            // Gone: a report it sent before it died is queued by now.
            return match recv_text(ctl, libc::MSG_DONTWAIT) {
                Ok(r) => Ok(Some(r)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
                Err(e) => Err(e),
            };
        }
    }
}

/// `env` (`K=V` entries, each name once) as changes to `base`; `None` if an entry is not UTF-8.
fn env_changes(env: &[std::ffi::CString], base: &BTreeMap<String, String>) -> Option<EnvChanges> {
    let mut set = Vec::new();
    let mut names = std::collections::BTreeSet::new();
    for e in env {
        let (k, v) = e.to_str().ok()?.split_once('=')?;
        names.insert(k);
        if base.get(k).is_none_or(|b| b != v) {
            set.push((k.to_string(), v.to_string()));
        }
    }
    let unset = base
        .keys()
        .filter(|k| !names.contains(k.as_str()))
        .cloned()
        .collect();
    Some(EnvChanges { set, unset })
}

pub(crate) fn parse_pid(reply: &str) -> Option<libc::pid_t> {
    let rest = reply.trim().strip_prefix("{\"pid\":")?;
    let rest = rest.trim_start().strip_suffix('}')?;
    rest.trim().parse().ok().filter(|p| *p > 0)
}

/// `landlock`: a Landlock ruleset fd follows the four stdio/go fds; the worker enforces it.
/// `joins`: that many cgroup join files follow, which the worker writes itself into.
pub(crate) fn request_json(
    req: &Request,
    rlimits: &[(i32, libc::rlimit)],
    landlock: bool,
    joins: usize,
) -> String {
    let mut s = String::with_capacity(256 + req.code.as_ref().map_or(0, String::len));
    s.push('{');
    match (&req.code, &req.path) {
        (Some(c), _) => {
            s.push_str("\"code\":");
            json_str(&mut s, c);
        }
        (None, p) => {
            s.push_str("\"path\":");
            json_str(&mut s, p.as_deref().unwrap_or(""));
        }
    }
    if let Some(e) = req.entry {
        s.push_str(",\"entry\":");
        json_str(&mut s, e);
    }
    s.push_str(",\"args\":[");
    for (i, a) in req.args.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        json_str(&mut s, a);
    }
    s.push_str("],\"env_set\":{");
    for (i, (k, v)) in req.env.set.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        json_str(&mut s, k);
        s.push(':');
        json_str(&mut s, v);
    }
    s.push_str("},\"env_unset\":[");
    for (i, k) in req.env.unset.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        json_str(&mut s, k);
    }
    s.push_str("],\"cwd\":");
    json_str(&mut s, &req.cwd);
    s.push_str(",\"rlimits\":");
    rlimits_json(&mut s, rlimits);
    let _ = write!(
        s,
        ",\"isolated\":{},\"unbuffered\":{},\"no_bytecode\":{},\"landlock\":{},\"join\":{}}}",
        req.isolated, req.unbuffered, req.no_bytecode, landlock, joins
    );
    s
}

/// `[[resource, soft, hard], ...]`, -1 meaning unlimited (`resource.RLIM_INFINITY` on Linux).
pub(crate) fn rlimits_json(s: &mut String, rlimits: &[(i32, libc::rlimit)]) {
    let value = |v: libc::rlim_t| -> i128 {
        if v == libc::RLIM_INFINITY {
            -1
        } else {
            v as i128
        }
    };
    s.push('[');
    for (i, (res, lim)) in rlimits.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        let _ = write!(s, "[{res},{},{}]", value(lim.rlim_cur), value(lim.rlim_max));
    }
    s.push(']');
}

pub(crate) fn json_str(out: &mut String, v: &str) {
    out.push('"');
    for c in v.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

pub(crate) fn socketpair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: valid out-array of two fds.
    if unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    } < 0
    {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both fds were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// One datagram with `fds` attached (SCM_RIGHTS).
pub(crate) fn send_with_fds(sock: &OwnedFd, data: &[u8], fds: &[RawFd]) -> io::Result<()> {
    let fds_len = std::mem::size_of_val(fds);
    // SAFETY: CMSG_SPACE is a pure computation.
    let space = unsafe { libc::CMSG_SPACE(fds_len as u32) } as usize;
    // u64 elements: cmsghdr alignment.
    let mut control = vec![0u64; space.div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    // SAFETY: a zeroed msghdr is valid; every pointer set below points at live buffers.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    // SAFETY: the control buffer holds one header with room for `fds` (CMSG_SPACE).
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(fds_len as u32) as _;
        std::ptr::copy_nonoverlapping(
            fds.as_ptr(),
            libc::CMSG_DATA(cmsg).cast::<RawFd>(),
            fds.len(),
        );
    }
    loop {
        // SAFETY: `msg` and everything it points to are alive for the call.
        let r = unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
        if r >= 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A child of this test that sends `msg` (if any) on `sock`, then exits; its pidfd.
    fn reporter(sock: &OwnedFd, msg: Option<&[u8]>) -> (libc::pid_t, OwnedFd) {
        // SAFETY: the child only makes async-signal-safe calls (send, _exit).
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            if let Some(m) = msg {
                // SAFETY: plain syscall with a buffer we own.
                unsafe { libc::send(sock.as_raw_fd(), m.as_ptr().cast(), m.len(), 0) };
            }
            // SAFETY: ends the child without running the test harness's exit handlers.
            unsafe { libc::_exit(0) };
        }
        // SAFETY: plain syscall; a new fd or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        assert!(fd >= 0, "pidfd_open: {}", io::Error::last_os_error());
        // SAFETY: pidfd_open returned a new fd nobody else owns.
        (pid, unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) })
    }

    #[test]
    fn a_worker_report_comes_or_its_death_is_seen() {
        let (ours, theirs) = socketpair().unwrap();
        // Reported, then gone: the report counts, whichever the poll sees first.
        let (pid, pidfd) = reporter(&theirs, Some(b"{\"worker_ok\":true}"));
        let r = worker_report(&ours, Some(&pidfd)).unwrap();
        assert_eq!(r.as_deref(), Some("{\"worker_ok\":true}"));
        // SAFETY: reaps our own child.
        unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
        // Gone without a report: seen through the pidfd (the reply deadline would be an error).
        let (pid, pidfd) = reporter(&theirs, None);
        assert_eq!(worker_report(&ours, Some(&pidfd)).unwrap(), None);
        // SAFETY: reaps our own child.
        unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
        assert!(is_worker_report("{\"join_error\": \"EACCES\"}"));
        assert!(!is_worker_report("{\"error\": \"fork failed\"}"));
    }

    #[test]
    fn parses_replies() {
        assert_eq!(parse_pid("{\"pid\": 123}"), Some(123));
        assert_eq!(parse_pid("{\"pid\": 0}"), None);
        assert_eq!(parse_pid("{\"error\": \"x\"}"), None);
    }

    #[test]
    fn escapes_json() {
        let mut s = String::new();
        json_str(&mut s, "a\"b\\c\n\u{1}é");
        assert_eq!(s, "\"a\\\"b\\\\c\\n\\u0001é\"");
    }
}
