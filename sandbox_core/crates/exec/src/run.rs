//! The executor: starts programs with isolation and supervises them to the end.
//!
//! CONTRACT (used by the agent; implementation may change, signatures may not without updating it):
//! - `Executor::new(config)` must be called inside a tokio runtime (it starts the SIGCHLD reaper).
//! - `Executor::start(cmd)` forks+execs with every isolation step, returns a `Running` at once.
//!   A supervisor task enforces the wall-time limit, output caps and collects the exit status
//!   (wait4 rusage: cpu time, max rss), reads cgroup oom / peak memory, kills the remaining process
//!   tree when the main process exits, removes the per-exec cgroup (or, with
//!   `enable_cgroup_pool`, hands a clean one back for reuse) and finally sends `Event::Exit`.
//! - Dropping a `Running` (or calling `kill`) kills the whole tree: cancellation of the caller
//!   (e.g. a dropped RPC) must never leave a process behind.
//! - `Executor::run(cmd, stdin)` = start + write stdin + collect events into an `Outcome`.
//! - The executor reaps every child of the process (it is a subreaper; see `reaper`): nothing else
//!   in the process may wait for children (no `std::process::Command::status`, no `tokio::process`).
//! - `start` returns once the program has exec'd (or failed a step): it blocks the calling thread
//!   for the clone + isolation syscalls + execve, typically 0.2-0.4 ms (see `spawn`).

use std::collections::{BTreeMap, HashMap};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

use crate::cgroup::{Cgroups, Pool};
use crate::error::{SetupError, SpawnError, Step};
use crate::limits::Limits;
use crate::reaper::Reaper;
use crate::seccomp::Filter;
use crate::spawn::{Groups, Identity, Isolation};
use crate::supervise::{supervise, Supervision};
use crate::tree::Tree;

/// How the agent isolates every program it starts.
#[derive(Debug, Clone)]
pub struct ExecutorConfig {
    /// uid/gid user programs run as; `None` keeps the agent's own (e.g. inside a user namespace).
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    /// Install the seccomp deny-list filter in every program.
    pub seccomp: bool,
    /// Use per-exec child cgroups under the agent's own cgroup when they are usable.
    pub use_cgroups: bool,
    /// Directory of the agent's own cgroup(s) to create children under; `None`: detect from
    /// /proc/self/cgroup. (v1: one per controller: memory, pids, cpu, cpuacct; v2: one dir.)
    pub cgroup_parent: Option<PathBuf>,
    /// Default working directory of programs.
    pub work_dir: PathBuf,
    /// Base environment given to every program (the request's env is layered on top).
    pub base_env: BTreeMap<String, String>,
    /// Limits applied where a request leaves a field at zero.
    pub default_limits: Limits,
    /// A user namespace (an fd of `/proc/PID/ns/user`) every program enters before it takes
    /// `uid`/`gid`, which are then ids inside it (an unprivileged range of the host's). It must
    /// be at `seccomp::USERNS_FD`, the fd the filter lets `setns` use: the executor copies it
    /// there otherwise, which in a threaded process waits for an RCU grace period.
    pub user_namespace: Option<Arc<OwnedFd>>,
}

/// What the executor found usable at start-up.
#[derive(Debug, Clone)]
pub struct Capabilities {
    /// "v1", "v2" or "none".
    pub cgroup_version: &'static str,
    pub seccomp: bool,
    pub uid: u32,
    pub gid: u32,
}

/// One program to run. Limits are already resolved (defaults applied, validated).
#[derive(Debug, Clone)]
pub struct Command {
    pub argv: Vec<String>,
    pub env: BTreeMap<String, String>,
    /// Do not inherit `ExecutorConfig::base_env`.
    pub clear_env: bool,
    /// `None`: the executor's work dir.
    pub cwd: Option<PathBuf>,
    pub limits: Limits,
    /// Confine the program's writes (create, change, remove files) to beneath this directory and
    /// `/dev/null`, with Landlock where the kernel has it (see `landlock`).
    pub write_within: Option<PathBuf>,
    /// Processes the program leaves behind (a shell's `cmd &`, a daemon) keep running after it
    /// exits, as in a container, until they end or the sandbox does; the exec's cgroup stays
    /// (with its limits) until it is empty. Without it they are killed with the exec.
    pub keep_descendants: bool,
    /// Through the Python zygote, call this function of its prelude (see
    /// `Executor::enable_python_zygote`) with the arguments after the program file, instead of
    /// running that file; a spawn runs the argv as it is. For a program the agent itself writes
    /// (the judge's check runner), so that each fork does not read and compile it again.
    pub zygote_entry: Option<&'static str>,
    /// Run on a pseudo-terminal of this size instead of pipes (see `pty`): its output, stdout
    /// and stderr merged as a terminal shows them, comes as `Event::Stdout`; its input goes
    /// through the terminal's line discipline (Ctrl-C is SIGINT); `Running::resize` changes it.
    pub terminal: Option<crate::pty::TerminalSize>,
    /// Run as this account instead of the executor's programs' user (ids inside the programs'
    /// user namespace, where there is one). Only an executor that sets ids may (`may_set_ids`);
    /// such a program never goes through the zygote, which runs as the programs' user.
    pub account: Option<Account>,
}

/// A user of the sandbox other than its programs' own: `Command::account`.
#[derive(Debug, Clone)]
pub struct Account {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups (the primary one among them, as `initgroups` makes them).
    pub groups: Vec<u32>,
}

/// What a running program reports, in order: output chunks (already capped), then one `Exit`.
#[derive(Debug)]
pub enum Event {
    Stdout(Bytes),
    Stderr(Bytes),
    Exit(Outcome),
}

/// The end of one execution. `stdout`/`stderr` are filled only by `Executor::run`.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// `None` when killed by a signal.
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    pub timed_out: bool,
    pub oom_killed: bool,
    pub cpu_limited: bool,
    pub pids_limited: bool,
    pub file_size_limited: bool,
    pub wall_time: Duration,
    pub cpu_time: Duration,
    pub peak_memory_bytes: u64,
    /// Run as a fork of the prewarmed Python zygote rather than a fresh exec (see `zygote`).
    pub zygote: bool,
}

/// A started program.
///
/// Dropping it kills the whole tree (the supervisor still reaps and cleans up in the background).
/// Because of that `Drop`, fields cannot be moved out by destructuring: take `stdin` with
/// `Option::take` and `events` with `std::mem::replace` if they must outlive the handle.
pub struct Running {
    pub pid: u32,
    /// Write end of the program's stdin; drop it to close stdin.
    pub stdin: Option<tokio::process::ChildStdin>,
    /// Output events, then exactly one `Event::Exit`.
    pub events: mpsc::Receiver<Event>,
    tree: Arc<Tree>,
    /// The master of its terminal (`Command::terminal`).
    terminal: Option<OwnedFd>,
}

impl Running {
    /// Send a signal to the program's process group.
    pub fn signal(&self, signo: i32) -> std::io::Result<()> {
        self.tree.signal(signo)
    }
    /// Kill the whole process tree now (process group + cgroup + descendants).
    pub fn kill(&self) {
        self.tree.kill()
    }
    /// Give the program's terminal a new size (its foreground process group sees SIGWINCH).
    /// ENOTTY for a program started without one.
    pub fn resize(&self, size: crate::pty::TerminalSize) -> std::io::Result<()> {
        match &self.terminal {
            Some(master) => {
                crate::pty::resize(master, size.validate().map_err(std::io::Error::other)?)
            }
            None => Err(std::io::Error::from_raw_os_error(libc::ENOTTY)),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.tree.kill();
    }
}

impl std::fmt::Debug for Running {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Running")
            .field("pid", &self.pid)
            .finish_non_exhaustive()
    }
}

/// Unique per process (several executors may share one cgroup parent, e.g. in tests).
static EXEC_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Starts programs with isolation. Cheap to share behind an `Arc`.
pub struct Executor {
    inner: Arc<Inner>,
}

struct Inner {
    config: ExecutorConfig,
    capabilities: Capabilities,
    identity: Identity,
    /// The programs' user namespace, at `seccomp::USERNS_FD`: held open, used by number.
    _userns_fd: Option<Arc<OwnedFd>>,
    seccomp: Option<Filter>,
    cgroups: Option<Cgroups>,
    /// Idle exec cgroups for reuse, once enabled (see `Executor::enable_cgroup_pool`).
    pool: OnceLock<Option<Arc<Pool>>>,
    reaper: &'static Reaper,
    running: AtomicU32,
    active: Mutex<HashMap<u64, Weak<Tree>>>,
    /// The Python fast path, once enabled (see `Executor::enable_python_zygote`).
    zygote: OnceLock<Option<crate::zygote::Zygote>>,
    /// Where zygotes are made from, once given (see `Executor::enable_python_template`).
    template: OnceLock<crate::template::Template>,
}

/// What `launch` starts.
#[derive(Clone, Copy)]
enum Launch {
    /// A user program (fast path if eligible), accounted as running.
    User,
    /// The Python zygote itself, with its control socket as fd 3; not accounted.
    Zygote(std::os::fd::RawFd),
}

/// Accounts one exec as running until dropped, even if its supervisor task is cancelled.
struct ActiveGuard {
    inner: Arc<Inner>,
    id: u64,
}

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        self.inner
            .active
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.id);
        self.inner.running.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Executor {
    pub fn new(config: ExecutorConfig) -> Result<Self, SetupError> {
        // Orphaned grandchildren of programs must come to us to be reaped and accounted.
        // SAFETY: plain prctl.
        if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0) } != 0 {
            return Err(SetupError::Reaper(std::io::Error::last_os_error()));
        }
        let reaper = Reaper::global().map_err(SetupError::Reaper)?;
        let seccomp = if config.seccomp {
            Some(Filter::build()?)
        } else {
            None
        };
        let cgroups = if config.use_cgroups {
            Cgroups::detect(config.cgroup_parent.as_deref())?
        } else {
            None
        };
        // SAFETY: plain syscalls.
        let (euid, egid) = unsafe { (libc::geteuid(), libc::getegid()) };
        let userns_fd = config
            .user_namespace
            .as_ref()
            .map(|fd| park_at(fd, crate::seccomp::USERNS_FD))
            .transpose()?;
        let userns = userns_fd.as_ref().map(|fd| fd.as_raw_fd());
        let identity = if config.uid.is_none() && config.gid.is_none() {
            Identity::default()
        } else if crate::caps::may_set_ids() {
            Identity {
                groups: Some(Groups::of(&[config.gid.unwrap_or(egid)])),
                gid: config.gid,
                uid: config.uid,
                userns,
            }
        } else {
            // Unprivileged: only a change that is possible at all (to our own ids) is attempted.
            Identity {
                groups: None,
                gid: config.gid.filter(|g| *g != egid),
                uid: config.uid.filter(|u| *u != euid),
                userns: None,
            }
        };
        let capabilities = Capabilities {
            cgroup_version: cgroups.as_ref().map_or("none", Cgroups::version),
            seccomp: seccomp.is_some(),
            uid: config.uid.unwrap_or(euid),
            gid: config.gid.unwrap_or(egid),
        };
        tracing::info!(?capabilities, parents = ?cgroups.as_ref().map(Cgroups::parents), "executor ready");
        Ok(Executor {
            inner: Arc::new(Inner {
                config,
                capabilities,
                identity,
                seccomp,
                cgroups,
                pool: OnceLock::new(),
                reaper,
                running: AtomicU32::new(0),
                active: Mutex::new(HashMap::new()),
                zygote: OnceLock::new(),
                template: OnceLock::new(),
                _userns_fd: userns_fd,
            }),
        })
    }

    pub fn capabilities(&self) -> Capabilities {
        self.inner.capabilities.clone()
    }

    pub fn config(&self) -> &ExecutorConfig {
        &self.inner.config
    }

    /// Number of programs running now.
    pub fn running(&self) -> u32 {
        self.inner.running.load(Ordering::Acquire)
    }

    /// Reuse exec cgroups instead of creating and removing one per exec, keeping up to `max_idle`
    /// idle ones (one is created right away: the first exec of a sandbox finds it ready). Only cgroup v1 hierarchies are pooled; elsewhere,
    /// and when called a second time, this does nothing. Isolation is the same: every exec still
    /// runs alone in its cgroup with its own limits, and a cgroup is reused only once it is empty
    /// and clean (no oom kill, no refused fork, next to no memory charged), with its peak-memory
    /// and CPU counters reset.
    ///
    /// Idle cgroups stay in the hierarchy until `kill_all` or the executor is dropped; code that
    /// expects no exec cgroups between execs (or removes the parent) should not enable this.
    pub fn enable_cgroup_pool(&self, max_idle: usize) {
        let inner = &self.inner;
        inner.pool.get_or_init(|| {
            let pool = inner
                .cgroups
                .as_ref()
                .and_then(|c| Pool::new(c, max_idle, max_idle.min(1)));
            tracing::debug!(?pool, "exec cgroup pool");
            pool
        });
    }

    /// Puts the calling thread under the seccomp filter (with `no_new_privs`), so programs it
    /// starts are cloned right here and inherit the filter, instead of being handed to the
    /// spawner thread and back (two thread switches per exec, each dear on a small VM). The
    /// thread then runs under the deny-list itself, for good: call it only from a thread that
    /// needs none of those syscalls any more (the agent's, once its sandbox is set up). Programs
    /// started from other threads still go through the spawner. Without seccomp, does nothing.
    pub fn wear_seccomp_on_this_thread(&self) -> Result<(), SetupError> {
        match &self.inner.seccomp {
            Some(f) => crate::spawner::wear_on_this_thread(f)
                .map_err(|e| SetupError::Seccomp(format!("install on this thread: {e}"))),
            None => Ok(()),
        }
    }

    /// Run Python executions (`python3 [-I|-u|-B]... (-c CODE | FILE) [args]` resolving to
    /// `python`) as forks of a prewarmed interpreter, with the same isolation as any exec (see
    /// `zygote`). The zygote is started on the second such exec, or now with `eager` (then inside a
    /// tokio runtime). Does nothing when called again or when `python` is not executable (every
    /// exec is then spawned). Returns whether the fast path is enabled.
    pub fn enable_python_zygote(
        &self,
        python: PathBuf,
        eager: bool,
        prelude: &'static str,
    ) -> bool {
        let enabled = self
            .inner
            .zygote
            .get_or_init(|| crate::zygote::Zygote::new(python, prelude))
            .is_some();
        if let (Some(z), true) = (self.zygote(), eager) {
            z.warm(&|fd| self.launch(self.zygote_command(z), Launch::Zygote(fd)));
        }
        enabled
    }

    /// Make the Python zygote (`enable_python_zygote` first) by asking a template process over
    /// `conn` for a fork of its interpreter that enters this executor's namespaces and takes its
    /// programs' isolation (see `template`), instead of starting one: the first Python execution
    /// takes it. Needs the programs' own user namespace and ids; the zygote is spawned as before
    /// whenever the template cannot make one. Returns whether zygotes are now made so.
    pub fn enable_python_template(&self, conn: OwnedFd) -> std::io::Result<bool> {
        let Some(z) = self.zygote() else {
            return Ok(false);
        };
        let i = &self.inner.identity;
        if i.userns.is_none() || i.uid.is_none() || i.gid.is_none() {
            return Ok(false);
        }
        let template = crate::template::Template::new(conn)?;
        if self.inner.template.set(template).is_err() {
            return Ok(true);
        }
        z.made_from_template();
        Ok(true)
    }

    /// Whether Python executions can take the zygote fast path.
    pub fn zygote_enabled(&self) -> bool {
        self.zygote().is_some()
    }

    /// Whether the Python zygote process is up now.
    pub fn zygote_running(&self) -> bool {
        self.zygote().is_some_and(|z| z.is_running())
    }

    /// Whether the Python zygote is up and done with its start-up (does not wait).
    pub fn zygote_ready(&self) -> bool {
        self.zygote().is_some_and(|z| z.is_ready())
    }

    /// Pid of the Python zygote process while it is up.
    pub fn zygote_pid(&self) -> Option<u32> {
        self.zygote().and_then(|z| z.pid())
    }

    fn zygote(&self) -> Option<&crate::zygote::Zygote> {
        self.inner.zygote.get().and_then(Option::as_ref)
    }

    /// Idle pooled exec cgroups now (0 without a pool).
    pub fn idle_cgroups(&self) -> usize {
        self.pool().map_or(0, |p| p.idle())
    }

    fn pool(&self) -> Option<&Arc<Pool>> {
        self.inner.pool.get().and_then(Option::as_ref)
    }

    /// Kill every program this executor started (lease expiry, shutdown), and remove the idle
    /// exec cgroups of the pool.
    pub fn kill_all(&self) {
        let trees: Vec<Arc<Tree>> = self
            .inner
            .active
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .filter_map(Weak::upgrade)
            .collect();
        for t in trees {
            t.kill();
        }
        if let Some(z) = self.zygote() {
            z.stop();
        }
        if let Some(p) = self.pool() {
            p.drain();
        }
    }

    /// Directories per-exec cgroups are created in (empty without cgroups).
    pub fn cgroup_parents(&self) -> Vec<PathBuf> {
        self.inner
            .cgroups
            .as_ref()
            .map(|c| c.parents().into_iter().map(PathBuf::from).collect())
            .unwrap_or_default()
    }

    /// Starts `cmd` with every isolation step. Errors are typed: `Invalid` (bad request, limits
    /// out of range, no runtime), `NotFound` (nothing to exec, decided before forking) or
    /// `Isolation` (the step that failed, with its errno).
    pub fn start(&self, cmd: Command) -> Result<Running, SpawnError> {
        self.launch(cmd, Launch::User)
    }

    /// The zygote's own command: long limits (its workers set their own, lower ones), the
    /// default memory and pids limits for its cgroup.
    fn zygote_command(&self, z: &crate::zygote::Zygote) -> Command {
        let mut limits = self.inner.config.default_limits.clone();
        limits.wall_time = crate::limits::MAX_WALL_TIME;
        limits.cpu_time = crate::limits::MAX_WALL_TIME;
        // As high as this process may go (raising a hard limit can be refused even to root).
        let hard = |res: libc::__rlimit_resource_t| {
            let mut cur = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            // SAFETY: plain syscall with a valid out-pointer.
            if unsafe { libc::getrlimit(res, &mut cur) } != 0 || cur.rlim_max == libc::RLIM_INFINITY
            {
                u64::MAX
            } else {
                cur.rlim_max
            }
        };
        limits.max_open_files = crate::limits::MAX_OPEN_FILES
            .min(u32::try_from(hard(libc::RLIMIT_NOFILE)).unwrap_or(u32::MAX));
        limits.max_file_size_bytes = hard(libc::RLIMIT_FSIZE);
        let cpu = hard(libc::RLIMIT_CPU).saturating_sub(1);
        limits.cpu_time = limits.cpu_time.min(Duration::from_secs(cpu.max(1)));
        limits.max_output_bytes = 64 << 10;
        if !self.inner.cgroups.as_ref().is_some_and(Cgroups::has_pids) {
            limits.max_pids = crate::limits::MAX_PIDS;
        }
        Command {
            argv: vec![
                z.python.display().to_string(),
                "-I".into(),
                "-c".into(),
                crate::zygote::SOURCE.into(),
                z.prelude.into(),
            ],
            env: BTreeMap::new(),
            clear_env: false,
            cwd: Some(PathBuf::from("/")),
            limits,
            write_within: None,
            keep_descendants: false,
            zygote_entry: None,
            terminal: None,
            account: None,
        }
    }

    fn launch(&self, cmd: Command, launch: Launch) -> Result<Running, SpawnError> {
        let inner = &self.inner;
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            SpawnError::Invalid("Executor::start must be called inside a tokio runtime".into())
        })?;
        cmd.limits.validate().map_err(SpawnError::Invalid)?;
        let prepared = crate::spawn::prepare(&cmd, &inner.config)?;
        let fast = match launch {
            // A zygote worker is reaped with its group killed, as every worker is.
            Launch::User if cmd.keep_descendants => None,
            // A terminal is made for a spawn: a zygote's workers inherit the zygote's stdio.
            Launch::User if cmd.terminal.is_some() => None,
            // The zygote runs as the programs' user.
            Launch::User if cmd.account.is_some() => None,
            // The zygote's environment is the base one (`zygote_command` adds nothing to it).
            Launch::User => self.zygote().and_then(|z| {
                let req = z.plan(
                    &cmd.argv,
                    cmd.zygote_entry,
                    &prepared,
                    &inner.config.base_env,
                )?;
                Some((z, req))
            }),
            Launch::Zygote(_) => None,
        };
        let started = Instant::now();
        let id = EXEC_COUNTER.fetch_add(1, Ordering::Relaxed);
        let cgroup = match (&inner.cgroups, self.pool(), launch) {
            (Some(c), _, Launch::Zygote(_)) => Some(Arc::new(
                c.create(&format!("zygote-{}-{id}", std::process::id()), &cmd.limits)?,
            )),
            (Some(_), Some(pool), _) => Some(Arc::new(pool.take(&cmd.limits)?)),
            (Some(c), None, _) => Some(Arc::new(
                c.create(&format!("exec-{}-{id}", std::process::id()), &cmd.limits)?,
            )),
            (None, _, _) => None,
        };
        let landlock = match &cmd.write_within {
            Some(dir) => confine_writes(dir)?,
            None => None,
        };
        let identity = match &cmd.account {
            None => inner.identity,
            // Only an executor that switches ids (its identity names a group list) may switch
            // to another account's.
            Some(a) if inner.identity.groups.is_some() => Identity {
                groups: Some(Groups::of(&a.groups)),
                gid: Some(a.gid),
                uid: Some(a.uid),
                userns: inner.identity.userns,
            },
            Some(_) => {
                return Err(SpawnError::Invalid(
                    "this executor does not switch users: it runs every program as its own".into(),
                ))
            }
        };
        let iso = Isolation {
            identity,
            seccomp: inner.seccomp.as_ref(),
            cgroup: cgroup.as_deref(),
            // RLIMIT_NPROC counts every process of the uid on the host, across sandboxes: use it
            // only when no pids cgroup bounds the program (ours, or the enclosing container's).
            nproc_rlimit: !inner.cgroups.as_ref().is_some_and(Cgroups::has_pids)
                && !crate::cgroup::enclosing_pids_limited(),
            fd3: match launch {
                Launch::Zygote(fd) => Some(fd),
                Launch::User => None,
            },
            landlock: landlock.as_ref().map(std::os::fd::AsRawFd::as_raw_fd),
            keep_group: cmd.keep_descendants,
            terminal: match cmd.terminal {
                Some(size) => Some(size.validate().map_err(SpawnError::Invalid)?),
                None => None,
            },
        };
        // On error the cgroup is dropped here, which removes it.
        let forked = match fast {
            Some((z, req)) => {
                let rlimits = crate::spawn::rlimits(&cmd.limits, &iso);
                let placed = match inner.template.get() {
                    Some(t) if z.first_run_in_place() => {
                        let run =
                            crate::zygote::request_json(&req, &rlimits, iso.landlock.is_some(), 0);
                        t.make_program(&prepared, &cmd.limits, &iso, &run, inner.reaper)
                            .inspect_err(|e| {
                                tracing::warn!(error = %e, "the template made no python program; forking a zygote's worker")
                            })
                            .ok()
                    }
                    _ => None,
                };
                match placed {
                    Some(s) => Some(s),
                    None => z.fork(&req, &rlimits, &iso, inner.reaper, &|fd| {
                        self.launch(self.zygote_command(z), Launch::Zygote(fd))
                    })?,
                }
            }
            None => None,
        };
        let zygote = forked.is_some();
        let made = match (forked, launch, inner.template.get()) {
            (Some(s), _, _) => Some(s),
            (None, Launch::Zygote(_), Some(t)) => t
                .make_zygote(&prepared, &cmd.limits, &iso, inner.reaper)
                .inspect_err(|e| {
                    tracing::warn!(error = %e, "the template made no python zygote; spawning it")
                })
                .ok(),
            _ => None,
        };
        let spawned = match made {
            Some(s) => s,
            None => crate::spawn::spawn(&prepared, &cmd.limits, &iso, inner.reaper)?,
        };
        tracing::debug!(pid = spawned.pid, argv0 = %cmd.argv[0], zygote, "exec started");

        let tree = Arc::new(Tree::new(
            spawned.pid,
            inner.reaper,
            cgroup,
            cmd.keep_descendants,
        ));
        // The zygote is not a user program: not counted, not killed by `kill_all` through the
        // active map (it is stopped there directly), and its supervisor must not keep `inner`
        // (which owns it) alive.
        let guard = matches!(launch, Launch::User).then(|| {
            inner
                .active
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(id, Arc::downgrade(&tree));
            inner.running.fetch_add(1, Ordering::AcqRel);
            ActiveGuard {
                inner: inner.clone(),
                id,
            }
        });

        let stdin =
            tokio::process::ChildStdin::from_std(std::process::ChildStdin::from(spawned.stdin))
                .map_err(
                    |e| tracing::error!(error = %e, "cannot watch the stdin pipe; stdin is closed"),
                )
                .ok();
        let (tx, rx) = mpsc::channel(64);
        let supervision = Supervision {
            tree: tree.clone(),
            exit: spawned.exit,
            pidfd: spawned.pidfd,
            stdout: spawned.stdout,
            stderr: spawned.stderr,
            limits: cmd.limits,
            started,
            events: tx,
            zygote,
        };
        runtime.spawn(async move {
            let _guard = guard;
            supervise(supervision).await;
        });
        Ok(Running {
            pid: spawned.pid as u32,
            stdin,
            events: rx,
            tree,
            terminal: spawned.terminal,
        })
    }

    /// Runs `cmd` to the end with `stdin` as its whole input; output (capped) lands in the
    /// `Outcome`. Dropping the future kills the program.
    pub async fn run(&self, cmd: Command, stdin: Bytes) -> Result<Outcome, SpawnError> {
        let mut running = self.start(cmd)?;
        if let Some(mut pipe) = running.stdin.take() {
            if !stdin.is_empty() {
                // A program that never reads its stdin must not hold up collecting its output;
                // EPIPE (it exited first) is expected and ignored. Dropping the pipe closes stdin.
                tokio::spawn(async move {
                    let _ = pipe.write_all(&stdin).await;
                });
            }
        }
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        while let Some(event) = running.events.recv().await {
            match event {
                Event::Stdout(b) => stdout.extend_from_slice(&b),
                Event::Stderr(b) => stderr.extend_from_slice(&b),
                Event::Exit(mut outcome) => {
                    outcome.stdout = stdout;
                    outcome.stderr = stderr;
                    return Ok(outcome);
                }
            }
        }
        Err(SpawnError::Isolation {
            step: Step::Exec,
            source: std::io::Error::other("supervisor ended without an exit status"),
        })
    }
}

/// `fd` itself when it is at `at`, else a close-on-exec copy at exactly `at` (which must be
/// free). Place it there before starting threads: growing the fd table of a multi-threaded
/// process waits for an RCU grace period.
fn park_at(fd: &Arc<OwnedFd>, at: std::os::fd::RawFd) -> Result<Arc<OwnedFd>, SetupError> {
    use std::os::fd::FromRawFd;
    if fd.as_raw_fd() == at {
        return Ok(fd.clone());
    }
    let err = |source| SetupError::UserNamespace { fd: at, source };
    // SAFETY: fcntl on a valid fd; the result, when valid, is ours.
    let got = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, at) };
    if got < 0 {
        return Err(err(std::io::Error::last_os_error()));
    }
    // SAFETY: just returned by fcntl, owned by nobody else.
    let copy = unsafe { OwnedFd::from_raw_fd(got) };
    if got != at {
        return Err(err(std::io::Error::from_raw_os_error(libc::EBUSY)));
    }
    Ok(Arc::new(copy))
}

/// The Landlock ruleset of `Command::write_within`; `None` (with a warning, once) where the kernel
/// has no Landlock: the program then runs unconfined, as on kernels before 5.13.
fn confine_writes(dir: &std::path::Path) -> Result<Option<std::os::fd::OwnedFd>, SpawnError> {
    match crate::landlock::write_only_beneath(dir) {
        Ok(Some(fd)) => Ok(Some(fd)),
        Ok(None) => {
            static WARNED: std::sync::Once = std::sync::Once::new();
            WARNED.call_once(|| {
                tracing::warn!(
                    "no Landlock in this kernel: judged programs may write outside their directory"
                )
            });
            Ok(None)
        }
        Err(source) => Err(SpawnError::Isolation {
            step: crate::error::Step::Landlock,
            source,
        }),
    }
}
