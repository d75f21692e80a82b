//! fork + exec with every isolation step, done by hand.
//!
//! `std::process::Command` cannot join a cgroup or load seccomp between fork and exec without
//! `pre_exec` closures whose safety is as hard to argue, and it waits for its children itself,
//! which the process-wide reaper forbids. So everything the child needs (strings, env block, BPF
//! program, rlimits, cgroup join fds, pipes) is prepared before the clone, and the child only
//! makes async-signal-safe system calls.
//!
//! The child is started like `posix_spawn` does it (`CLONE_VM | CLONE_VFORK`, see
//! [`Reaper::spawn_registered`]): it shares the agent's memory until it execs, so nothing is
//! copied, and the agent's thread resumes only once the child has exec'd or exited. A failed step
//! is reported as (step, errno) in memory of the suspended parent's frame; nothing reported when
//! the clone returns means exec succeeded. With seccomp the clone is made by a thread that wears
//! the filter (the agent's serving thread, `Executor::wear_seccomp_on_this_thread`, else the
//! spawner thread, see `spawner`), so the child inherits one short program instead of attaching it.
//!
//! What a short exec would otherwise spend its time on, and what this module does instead: a
//! fork would copy the agent's page tables and exec tear them down again (the vfork-style clone
//! copies nothing); three cgroup directories made, configured and removed per exec (idle ones
//! are reused, `cgroup::Pool`); the child woken on another CPU (`Pin` keeps it on the parent's);
//! thread hops to learn of the exit (a pidfd on the caller's runtime, `Reaper::try_reap`).

use std::collections::BTreeMap;
use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use tokio::sync::oneshot;

use crate::cgroup::ExecCgroup;
use crate::error::{SpawnError, Step};
use crate::limits::Limits;
use crate::pty::TerminalSize;
use crate::reaper::{ExitInfo, Reaper};
use crate::run::{Command, ExecutorConfig};
use crate::seccomp::Filter;
use crate::spawner::Spawner;

/// PATH used to find the program when its environment has none.
pub const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Credentials the child switches to. `groups` is set whenever an identity is configured, so the
/// program never keeps the agent's supplementary groups. With `userns` (an fd of a user
/// namespace, always `seccomp::USERNS_FD`, the one the filter lets `setns` use) the child enters
/// it first, and the ids are ids inside it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Identity {
    pub groups: Option<Groups>,
    pub gid: Option<libc::gid_t>,
    pub uid: Option<libc::uid_t>,
    pub userns: Option<RawFd>,
}

/// Most supplementary groups a program is given (a user in more keeps the first ones).
pub const MAX_GROUPS: usize = 32;

/// Supplementary groups, held by value so that an `Identity` stays `Copy` for the child.
#[derive(Debug, Clone, Copy, Default)]
pub struct Groups {
    ids: [libc::gid_t; MAX_GROUPS],
    len: usize,
}

impl Groups {
    /// The first `MAX_GROUPS` of `ids`.
    pub fn of(ids: &[libc::gid_t]) -> Groups {
        let mut g = Groups::default();
        for id in ids.iter().take(MAX_GROUPS) {
            g.ids[g.len] = *id;
            g.len += 1;
        }
        g
    }

    pub fn ids(&self) -> &[libc::gid_t] {
        &self.ids[..self.len]
    }
}

/// Isolation settings of one spawn.
pub struct Isolation<'a> {
    pub identity: Identity,
    pub seccomp: Option<&'a Filter>,
    pub cgroup: Option<&'a ExecCgroup>,
    /// No pids cgroup: bound the process count with RLIMIT_NPROC (per uid and not enforced for
    /// root, so weaker). There is no RLIMIT_AS counterpart for memory on purpose: address-space
    /// limits break runtimes that reserve large ranges up front (V8, the JVM, Go, sanitizers);
    /// without a memory cgroup the enclosing container's limit is the bound.
    pub nproc_rlimit: bool,
    /// An fd to give the program as fd 3 (the zygote's control socket); everything else above 2
    /// is still closed.
    pub fd3: Option<RawFd>,
    /// A Landlock ruleset the program enforces on itself before exec (`Command::write_within`).
    pub landlock: Option<RawFd>,
    /// Its process group is not killed when it is reaped (`Command::keep_descendants`).
    pub keep_group: bool,
    /// A pseudo-terminal of this size for its stdio instead of pipes (`Command::terminal`).
    pub terminal: Option<TerminalSize>,
}

/// A started program: its pid, its exit status to come, and the agent's ends of its pipes.
pub struct Spawned {
    pub pid: libc::pid_t,
    pub exit: oneshot::Receiver<ExitInfo>,
    /// Readable once the program has exited (see `Reaper::try_reap`); `None` on old kernels.
    pub pidfd: Option<OwnedFd>,
    pub stdin: OwnedFd,
    /// Read ends of the program's output pipes, already non-blocking. With a terminal, `stdout`
    /// is its master (both streams of the program) and `stderr` is at its end.
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
    /// The master of the program's terminal, to resize it.
    pub terminal: Option<OwnedFd>,
}

impl Spawned {
    /// `child` (spawned, or forked by a zygote or a template and adopted), with the agent's ends
    /// of its pipes and its terminal.
    pub(crate) fn of(
        child: crate::reaper::Child,
        stdin: OwnedFd,
        stdout: OwnedFd,
        stderr: OwnedFd,
        terminal: Option<OwnedFd>,
    ) -> Spawned {
        Spawned {
            pid: child.pid,
            exit: child.exit,
            pidfd: child.pidfd,
            stdin,
            stdout,
            stderr,
            terminal,
        }
    }
}

/// A command checked and converted to what `execve` takes.
#[derive(Debug)]
pub struct Prepared {
    pub program: CString,
    pub argv: Vec<CString>,
    pub env: Vec<CString>,
    pub cwd: CString,
}

/// Validates `cmd`, builds its environment (base env unless `clear_env`, request env on top) and
/// resolves argv[0] through the program's own PATH, so a missing program fails here, unforked.
pub fn prepare(cmd: &Command, config: &ExecutorConfig) -> Result<Prepared, SpawnError> {
    let invalid = |m: String| SpawnError::Invalid(m);
    let Some(argv0) = cmd.argv.first() else {
        return Err(invalid("argv is empty".into()));
    };
    if argv0.is_empty() {
        return Err(invalid("argv[0] is empty".into()));
    }
    let argv = cmd
        .argv
        .iter()
        .map(|a| {
            CString::new(a.as_bytes()).map_err(|_| invalid(format!("NUL byte in argument {a:?}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut env: BTreeMap<&str, &str> = BTreeMap::new();
    if !cmd.clear_env {
        env.extend(
            config
                .base_env
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str())),
        );
    }
    env.extend(cmd.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    let env_block = env
        .iter()
        .map(|(k, v)| {
            if k.is_empty() || k.contains('=') {
                return Err(invalid(format!("bad environment variable name {k:?}")));
            }
            CString::new(format!("{k}={v}"))
                .map_err(|_| invalid(format!("NUL byte in environment variable {k}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let cwd_path = cmd.cwd.as_deref().unwrap_or(&config.work_dir);
    let cwd = CString::new(cwd_path.as_os_str().as_bytes())
        .map_err(|_| invalid(format!("NUL byte in cwd {cwd_path:?}")))?;
    let program = resolve_program(argv0, env.get("PATH").copied(), cwd_path)?;
    let program = CString::new(program.as_os_str().as_bytes())
        .map_err(|_| invalid("NUL byte in program path".into()))?;
    Ok(Prepared {
        program,
        argv,
        env: env_block,
        cwd,
    })
}

/// Finds `name` like `execvp` would, relative paths (in `name` or PATH) taken from `cwd`.
pub fn resolve_program(
    name: &str,
    path_var: Option<&str>,
    cwd: &Path,
) -> Result<PathBuf, SpawnError> {
    let not_found = |errno| SpawnError::NotFound {
        program: name.to_string(),
        source: io::Error::from_raw_os_error(errno),
    };
    if name.contains('/') {
        let p = cwd.join(name);
        return match executable(&p) {
            Ok(()) => Ok(p),
            Err(errno) => Err(not_found(errno)),
        };
    }
    let mut denied = false;
    for dir in path_var.unwrap_or(DEFAULT_PATH).split(':') {
        let dir = if dir.is_empty() {
            Path::new(".")
        } else {
            Path::new(dir)
        };
        let candidate = cwd.join(dir).join(name);
        match executable(&candidate) {
            Ok(()) => return Ok(candidate),
            Err(libc::EACCES) => denied = true,
            Err(_) => {}
        }
    }
    Err(not_found(if denied { libc::EACCES } else { libc::ENOENT }))
}

/// A regular file with an execute bit; exact permission checks are the kernel's at exec time
/// (the program may run as another uid than the agent).
fn executable(p: &Path) -> Result<(), i32> {
    match std::fs::metadata(p) {
        Ok(m) if m.is_file() && m.permissions().mode() & 0o111 != 0 => Ok(()),
        Ok(_) => Err(libc::EACCES),
        Err(e) => Err(e.raw_os_error().unwrap_or(libc::ENOENT)),
    }
}

/// Everything the child touches, as raw values and pointers into memory owned by the parent's
/// stack frame (the parent is suspended, its frame alive, until the child has exec'd or exited).
struct ChildPlan<'a> {
    join_fds: &'a [RawFd],
    rlimits: &'a [(i32, libc::rlimit)],
    cwd: *const libc::c_char,
    identity: Identity,
    seccomp: Option<&'a libc::sock_fprog>,
    stdio: [RawFd; 3],
    /// `stdio` is a terminal, to become the controlling terminal of the child's session.
    terminal: bool,
    /// Dup'ed to fd 3 (inheritable) when not -1.
    fd3: RawFd,
    /// Landlock ruleset to enforce when not -1.
    landlock: RawFd,
    /// Written by the child only, read by the parent after the clone returned.
    report: *mut Report,
    /// CPUs to give the child back (see `Pin`).
    affinity: Option<&'a libc::cpu_set_t>,
    program: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
}

/// A failed step of the child: `step` 0 means none (exec succeeded).
#[derive(Default)]
struct Report {
    step: u8,
    errno: i32,
}

/// Starts `prep` with the isolation of `iso`. Blocks until the child has exec'd or reported a
/// failed step (the time of the clone + the isolation syscalls + execve).
pub fn spawn(
    prep: &Prepared,
    limits: &Limits,
    iso: &Isolation<'_>,
    reaper: &Reaper,
) -> Result<Spawned, SpawnError> {
    let join_files = iso.cgroup.map(ExecCgroup::join_files).transpose()?;
    let join_fds: &[RawFd] = join_files.as_ref().map_or(&[], |f| f.raw());
    let rlimits = rlimits(limits, iso);
    let seccomp: Option<libc::sock_fprog> = match iso.seccomp {
        Some(f) => Some(libc::sock_fprog {
            len: u16::try_from(f.program().len()).map_err(|_| SpawnError::Isolation {
                step: Step::Seccomp,
                source: io::Error::other("seccomp program too long"),
            })?,
            filter: f.program().as_ptr() as *mut libc::sock_filter,
        }),
        None => None,
    };
    let argv: Vec<*const libc::c_char> = prep
        .argv
        .iter()
        .map(|a| a.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect();
    let envp: Vec<*const libc::c_char> = prep
        .env
        .iter()
        .map(|a| a.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect();

    let ends = match iso.terminal {
        None => Stdio::pipes(),
        Some(size) => Stdio::terminal(size),
    }?;

    // Where the clone happens: here, unpinned, when this thread wears the filter itself (see
    // `Executor::wear_seccomp_on_this_thread`): the child inherits it without a hand-over; else
    // on the spawner thread, which wears it (see `spawner`), with the CPUs of this thread given
    // back to the child; else here, pinned (see `Pin`), the child attaching the filter itself.
    let worn = iso.seccomp.is_some_and(crate::spawner::this_thread_wears);
    let mut own_cpus = None;
    let spawner = iso
        .seccomp
        .filter(|_| !worn)
        .and_then(Spawner::for_filter)
        .filter(|_| {
            own_cpus = current_affinity();
            own_cpus.is_some()
        });
    let pin = match spawner {
        Some(_) => None,
        None if worn => None,
        None => Pin::current_cpu(),
    };
    let mut report = Report::default();
    let plan = ChildPlan {
        join_fds,
        rlimits: &rlimits,
        cwd: prep.cwd.as_ptr(),
        identity: iso.identity,
        seccomp: seccomp.as_ref().filter(|_| spawner.is_none() && !worn),
        stdio: ends.child.each_ref().map(AsRawFd::as_raw_fd),
        terminal: iso.terminal.is_some(),
        fd3: iso.fd3.unwrap_or(-1),
        landlock: iso.landlock.unwrap_or(-1),
        report: &mut report,
        affinity: pin.as_ref().map(|p| &p.old).or(own_cpus.as_ref()),
        program: prep.program.as_ptr(),
        argv: argv.as_ptr(),
        envp: envp.as_ptr(),
    };
    let arg = PlanPtr(&plan as *const ChildPlan<'_> as *mut libc::c_void);
    // SAFETY: `child_entry` only makes async-signal-safe syscalls, reads `plan` (alive in this
    // frame while we wait, here or for the spawner) and writes `report`, which nothing else
    // touches meanwhile.
    let keep_group = iso.keep_group;
    let clone = move || unsafe { reaper.spawn_registered(child_entry, { arg }.0, keep_group) };
    let started = match spawner {
        Some(s) => s
            .run(clone)
            .unwrap_or_else(|| Err(io::Error::other("the spawner thread failed"))),
        None => clone(),
    };
    // SAFETY: the child is past exec or gone: it no longer writes `report`.
    let failed = unsafe { std::ptr::read_volatile(plan.report) };
    drop(pin);
    let child = started.map_err(|e| SpawnError::Isolation {
        step: Step::Fork,
        source: e,
    })?;
    let Stdio {
        child: child_ends,
        stdin,
        stdout,
        stderr,
        terminal,
    } = ends;
    drop(child_ends);
    match (failed.step != 0).then(|| (step_from_u8(failed.step), failed.errno)) {
        None => Ok(Spawned::of(child, stdin, stdout, stderr, terminal)),
        Some((step, errno)) => {
            // The child is in `_exit(127)`; reap it so no zombie and no cgroup member remains.
            drop(child.pidfd);
            let _ = reaper.reap_blocking(child.pid, child.exit);
            let source = io::Error::from_raw_os_error(errno);
            if step == Step::Exec
                && matches!(
                    errno,
                    libc::ENOENT | libc::EACCES | libc::ENOEXEC | libc::ENOTDIR
                )
            {
                let program = OsStr::from_bytes(prep.program.as_bytes())
                    .to_string_lossy()
                    .into_owned();
                return Err(SpawnError::NotFound { program, source });
            }
            Err(SpawnError::Isolation { step, source })
        }
    }
}

/// A program's stdio: the ends its child takes (as fds 0, 1, 2) and the agent's.
struct Stdio {
    child: [OwnedFd; 3],
    stdin: OwnedFd,
    stdout: OwnedFd,
    stderr: OwnedFd,
    terminal: Option<OwnedFd>,
}

impl Stdio {
    fn pipes() -> Result<Self, SpawnError> {
        let err = |e| SpawnError::Isolation {
            step: Step::Pipe,
            source: e,
        };
        let (stdin_r, stdin_w) = pipe().map_err(err)?;
        let (stdout_r, stdout_w) = pipe().map_err(err)?;
        let (stderr_r, stderr_w) = pipe().map_err(err)?;
        // The agent reads output without blocking (see `Spawned`).
        nonblocking(&stdout_r).map_err(err)?;
        nonblocking(&stderr_r).map_err(err)?;
        // The child's ends must not already sit on 0..=2 (an agent started with those closed),
        // or a dup2 could clobber another one.
        Ok(Stdio {
            child: [
                crate::fds::at_least(stdin_r, 3).map_err(err)?,
                crate::fds::at_least(stdout_w, 3).map_err(err)?,
                crate::fds::at_least(stderr_w, 3).map_err(err)?,
            ],
            stdin: stdin_w,
            stdout: stdout_r,
            stderr: stderr_r,
            terminal: None,
        })
    }

    /// The three of the child on one terminal; the agent writes input to its master and reads
    /// both output streams from it. `stderr` is a pipe already at its end.
    fn terminal(size: TerminalSize) -> Result<Self, SpawnError> {
        let err = |e| SpawnError::Isolation {
            step: Step::Terminal,
            source: e,
        };
        let pair = crate::pty::open(size).map_err(err)?;
        let program = crate::fds::at_least(pair.program, 3).map_err(err)?;
        let (stderr, _closed) = pipe().map_err(err)?;
        nonblocking(&stderr).map_err(err)?;
        Ok(Stdio {
            child: [
                program.try_clone().map_err(err)?,
                program.try_clone().map_err(err)?,
                program,
            ],
            stdin: pair.master.try_clone().map_err(err)?,
            terminal: Some(pair.master.try_clone().map_err(err)?),
            stdout: pair.master,
            stderr,
        })
    }
}

/// The plan handed to the spawner thread (which only passes it on to the child).
#[derive(Clone, Copy)]
struct PlanPtr(*mut libc::c_void);

// SAFETY: the pointee is only read (and its report written) by the child, while the thread that
// owns it waits; the spawner thread merely carries the pointer.
unsafe impl Send for PlanPtr {}

/// CPUs the calling thread may run on.
fn current_affinity() -> Option<libc::cpu_set_t> {
    // SAFETY: plain syscall with a valid out-pointer; a zeroed cpu_set_t is an empty set.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        (libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0)
            .then_some(set)
    }
}

/// Keeps the calling thread on the CPU it runs on while it starts a child, which inherits the
/// pinning: the suspended parent's CPU is free, and a child placed on another CPU first has to be
/// woken there (an inter-processor interrupt, costly in a VM: several times the start of a
/// pinned child). The child gets `old` back before exec, and the parent when this is dropped.
struct Pin {
    old: libc::cpu_set_t,
}

impl Pin {
    fn current_cpu() -> Option<Pin> {
        // SAFETY: plain syscalls with valid out-pointers; a zeroed cpu_set_t is an empty set.
        unsafe {
            let mut old: libc::cpu_set_t = std::mem::zeroed();
            if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut old) != 0 {
                return None;
            }
            let cpu = libc::sched_getcpu();
            if cpu < 0 || !libc::CPU_ISSET(cpu as usize, &old) || libc::CPU_COUNT(&old) < 2 {
                return None;
            }
            let mut one: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu as usize, &mut one);
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &one) != 0 {
                return None;
            }
            Some(Pin { old })
        }
    }
}

impl Drop for Pin {
    fn drop(&mut self) {
        // SAFETY: plain syscall with a valid mask (the thread's own, from before).
        let r = unsafe {
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &self.old)
        };
        if r != 0 {
            tracing::warn!(error = %io::Error::last_os_error(), "cannot restore the CPU affinity");
        }
    }
}

pub(crate) fn rlimits(limits: &Limits, iso: &Isolation<'_>) -> Vec<(i32, libc::rlimit)> {
    let both = |v: u64| libc::rlimit {
        rlim_cur: v as libc::rlim_t,
        rlim_max: v as libc::rlim_t,
    };
    let infinite_if_max = |v: u64| {
        if v == u64::MAX {
            libc::RLIM_INFINITY
        } else {
            v as libc::rlim_t
        }
    };
    // Whole seconds, rounded up: the kernel counts CPU rlimits in seconds. SIGXCPU at the soft
    // limit lets us tell a CPU kill apart; the hard limit one second later is the SIGKILL backstop.
    let cpu_secs = limits.cpu_time.as_secs() + u64::from(limits.cpu_time.subsec_nanos() > 0);
    let cpu_secs = cpu_secs.max(1);
    let mut v = vec![
        (
            libc::RLIMIT_CPU as i32,
            libc::rlimit {
                rlim_cur: cpu_secs as _,
                rlim_max: (cpu_secs + 1) as _,
            },
        ),
        (libc::RLIMIT_FSIZE as i32, {
            let f = infinite_if_max(limits.max_file_size_bytes);
            libc::rlimit {
                rlim_cur: f,
                rlim_max: f,
            }
        }),
        (
            libc::RLIMIT_NOFILE as i32,
            both(u64::from(limits.max_open_files)),
        ),
        (libc::RLIMIT_CORE as i32, both(0)),
    ];
    if iso.nproc_rlimit {
        v.push((libc::RLIMIT_NPROC as i32, both(u64::from(limits.max_pids))));
    }
    // Unprivileged agents (a pod's root agent too, once it took its own id: it has no
    // CAP_SYS_RESOURCE) cannot raise a hard limit: stay within the current one.
    // SAFETY: plain syscall.
    if unsafe { libc::geteuid() } != 0 {
        for (res, lim) in &mut v {
            let mut cur = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            // SAFETY: valid out-pointer.
            if unsafe { libc::getrlimit(*res as _, &mut cur) } == 0
                && cur.rlim_max != libc::RLIM_INFINITY
            {
                lim.rlim_max = lim.rlim_max.min(cur.rlim_max);
                lim.rlim_cur = lim.rlim_cur.min(lim.rlim_max);
            }
        }
    }
    v
}

pub(crate) fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    // Close-on-exec so no other exec inherits them; blocking (O_NONBLOCK would apply to the
    // child's end too), the agent's ends are switched later.
    let ends = crate::fds::pipe()?;
    // The pipe's inode is the agent's, mode 0600: a program reopening its own stdio by name
    // (`> /dev/stderr`, `open("/dev/stdout")`, i.e. /proc/self/fd/N) would be refused. Reaching
    // it by name takes access to the program's /proc/PID/fd, so this opens it to nobody else.
    // SAFETY: plain syscall on an fd we own.
    if unsafe { libc::fchmod(ends.0.as_raw_fd(), 0o666) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(ends)
}

/// Sets O_NONBLOCK on a fresh pipe end (whose only status flag is the access mode, which F_SETFL
/// leaves alone).
pub(crate) fn nonblocking(fd: &OwnedFd) -> io::Result<()> {
    // SAFETY: plain syscall on an fd we own.
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn step_from_u8(b: u8) -> Step {
    Step::from_code(b).unwrap_or(Step::Exec)
}

/// Reports `step` with the current errno and exits. Async-signal-safe.
unsafe fn fail(report: *mut Report, step: Step) -> ! {
    let errno = *libc::__errno_location();
    std::ptr::write_volatile(
        report,
        Report {
            step: step as u8,
            errno,
        },
    );
    libc::_exit(127)
}

/// Entry point of the cloned child, on its own stack.
extern "C" fn child_entry(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `ChildPlan` of `spawn`, whose frame outlives the child's use of it.
    unsafe { child_main(&*(arg as *const ChildPlan<'_>)) }
}

/// The child between clone and exec, on its own stack but in the agent's memory: only
/// async-signal-safe syscalls, no allocation, no panics, nothing written but `report`.
/// Order matters: join the cgroup before anything can allocate memory worth accounting; drop
/// privileges after the steps that need them (cgroup, rlimits, chdir) and before seccomp, which
/// `no_new_privs` must precede for an unprivileged process. (A child of the spawner thread has
/// both already, inherited: every step here is allowed by the filter.)
unsafe fn child_main(p: &ChildPlan<'_>) -> ! {
    if let Some(mask) = p.affinity {
        // Not an isolation step: on failure the program merely keeps to one CPU.
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), mask);
    }
    for &fd in p.join_fds {
        // "0" means the writer itself (v1 `tasks`: this thread, the child's only one).
        if libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
            fail(p.report, Step::JoinCgroup);
        }
    }
    if libc::setsid() < 0 {
        fail(p.report, Step::SetSid);
    }
    for (res, lim) in p.rlimits {
        if libc::setrlimit(*res as _, lim) != 0 {
            fail(p.report, Step::Rlimit);
        }
    }
    if libc::chdir(p.cwd) != 0 {
        fail(p.report, Step::Chdir);
    }
    // Into the sandbox's user namespace once the host-side steps (cgroup, rlimits, cwd) are done:
    // from here on the child has capabilities only inside it.
    if let Some(ns) = p.identity.userns {
        if libc::setns(ns, libc::CLONE_NEWUSER) != 0 {
            fail(p.report, Step::UserNs);
        }
    }
    // Raw syscalls: glibc's set*id wrappers broadcast to all threads of the parent image.
    if let Some(g) = &p.identity.groups {
        if libc::syscall(libc::SYS_setgroups, g.len as libc::c_long, g.ids.as_ptr()) != 0 {
            fail(p.report, Step::SetGroups);
        }
    }
    if let Some(g) = p.identity.gid {
        if libc::syscall(libc::SYS_setresgid, g, g, g) != 0 {
            fail(p.report, Step::SetGid);
        }
    }
    if let Some(u) = p.identity.uid {
        if libc::syscall(libc::SYS_setresuid, u, u, u) != 0 {
            fail(p.report, Step::SetUid);
        }
    }
    if libc::prctl(
        libc::PR_SET_NO_NEW_PRIVS,
        1 as libc::c_ulong,
        0 as libc::c_ulong,
        0 as libc::c_ulong,
        0 as libc::c_ulong,
    ) != 0
    {
        fail(p.report, Step::NoNewPrivs);
    }
    if p.landlock >= 0
        && libc::syscall(
            crate::landlock::SYS_RESTRICT_SELF,
            p.landlock as libc::c_long,
            0 as libc::c_long,
        ) != 0
    {
        fail(p.report, Step::Landlock);
    }
    if let Some(prog) = p.seccomp {
        if libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER as libc::c_ulong,
            prog as *const libc::sock_fprog,
        ) != 0
        {
            fail(p.report, Step::Seccomp);
        }
    }
    for (target, &fd) in p.stdio.iter().enumerate() {
        if libc::dup2(fd, target as libc::c_int) < 0 {
            fail(p.report, Step::Dup2);
        }
    }
    // The session made by `setsid` above has no controlling terminal yet: this one becomes it.
    if p.terminal && libc::ioctl(0, libc::TIOCSCTTY, 0 as libc::c_int) != 0 {
        fail(p.report, Step::Terminal);
    }
    let mut first_closed = 3;
    if p.fd3 >= 0 {
        // dup2 onto itself keeps close-on-exec set: clear it by hand then.
        let ok = if p.fd3 == 3 {
            libc::fcntl(3, libc::F_SETFD, 0) == 0
        } else {
            libc::dup2(p.fd3, 3) == 3
        };
        if !ok {
            fail(p.report, Step::Dup2);
        }
        first_closed = 4;
    }
    // Belt and braces: an fd some library opened without O_CLOEXEC must not reach user code.
    // Failure (kernel < 5.11) is tolerable: the agent's own fds are all close-on-exec.
    libc::syscall(
        libc::SYS_close_range,
        first_closed as libc::c_uint,
        libc::c_uint::MAX,
        libc::CLOSE_RANGE_CLOEXEC,
    );
    // Ignored signals stay ignored across exec (SIGPIPE is ignored in the agent): reset all.
    let mut dfl: libc::sigaction = std::mem::zeroed();
    dfl.sa_sigaction = libc::SIG_DFL;
    // 1..NSIG (65 on Linux); glibc refuses its two internal signals, which is fine.
    for sig in 1..65 {
        if sig != libc::SIGKILL && sig != libc::SIGSTOP {
            libc::sigaction(sig, &dfl, std::ptr::null_mut());
        }
    }
    let mut empty: libc::sigset_t = std::mem::zeroed();
    libc::sigemptyset(&mut empty);
    libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
    libc::execve(p.program, p.argv, p.envp);
    fail(p.report, Step::Exec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::Limits;

    fn config() -> ExecutorConfig {
        ExecutorConfig {
            uid: None,
            gid: None,
            seccomp: false,
            use_cgroups: false,
            cgroup_parent: None,
            work_dir: PathBuf::from("/"),
            base_env: [
                ("PATH".to_string(), "/usr/bin:/bin".to_string()),
                ("A".into(), "base".into()),
            ]
            .into(),
            default_limits: Limits::default(),
            user_namespace: None,
        }
    }

    fn cmd(argv: &[&str]) -> Command {
        Command {
            argv: argv.iter().map(|s| s.to_string()).collect(),
            env: BTreeMap::new(),
            clear_env: false,
            cwd: None,
            limits: Limits::default(),
            write_within: None,
            keep_descendants: false,
            zygote_entry: None,
            terminal: None,
            account: None,
        }
    }

    #[test]
    fn resolves_through_path() {
        let p = prepare(&cmd(&["sh", "-c", "true"]), &config()).unwrap();
        assert!(p.program.to_bytes().ends_with(b"/sh"));
        assert_eq!(p.argv[0].to_bytes(), b"sh");
    }

    #[test]
    fn request_env_overrides_base() {
        let mut c = cmd(&["/bin/true"]);
        c.env.insert("A".into(), "req".into());
        let p = prepare(&c, &config()).unwrap();
        assert!(p.env.iter().any(|e| e.to_bytes() == b"A=req"));
        c.clear_env = true;
        let p = prepare(&c, &config()).unwrap();
        assert_eq!(p.env.len(), 1);
    }

    #[test]
    fn rejects_bad_requests() {
        let bad = |c: Command| matches!(prepare(&c, &config()), Err(SpawnError::Invalid(_)));
        assert!(bad(cmd(&[])));
        assert!(bad(cmd(&[""])));
        assert!(bad(cmd(&["/bin/echo", "a\0b"])));
        let mut c = cmd(&["/bin/true"]);
        c.env.insert("A=B".into(), "x".into());
        assert!(bad(c));
        let mut c = cmd(&["/bin/true"]);
        c.env.insert("".into(), "x".into());
        assert!(bad(c));
        let mut c = cmd(&["/bin/true"]);
        c.env.insert("K".into(), "x\0".into());
        assert!(bad(c));
        let mut c = cmd(&["/bin/true"]);
        c.cwd = Some(PathBuf::from("/tmp\0x"));
        assert!(bad(c));
    }

    #[test]
    fn missing_program_is_not_found() {
        for argv0 in ["no-such-program-xyz", "/no/such/program", "./nope"] {
            match prepare(&cmd(&[argv0]), &config()) {
                Err(SpawnError::NotFound { source, .. }) => {
                    assert_eq!(source.raw_os_error(), Some(libc::ENOENT))
                }
                other => panic!("{argv0}: {other:?}"),
            }
        }
        // A directory is not executable.
        assert!(matches!(
            prepare(&cmd(&["/tmp"]), &config()),
            Err(SpawnError::NotFound { .. })
        ));
    }

    #[test]
    fn step_codes_round_trip() {
        for s in [
            Step::Pipe,
            Step::JoinCgroup,
            Step::Seccomp,
            Step::Exec,
            Step::CgroupLimit,
            Step::Landlock,
        ] {
            assert_eq!(step_from_u8(s as u8), s);
        }
    }
}
