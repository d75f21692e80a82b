//! The executor: starts programs with isolation and supervises them to the end.
//!
//! CONTRACT (used by the agent; implementation may change, signatures may not without updating it):
//! - `Executor::new(config)` must be called inside a tokio runtime (it starts the SIGCHLD reaper).
//! - `Executor::start(cmd)` forks+execs with every isolation step, returns a `Running` at once.
//!   A supervisor task enforces the wall-time limit, output caps and collects the exit status
//!   (wait4 rusage: cpu time, max rss), reads cgroup oom / peak memory, kills the remaining process
//!   tree when the main process exits, removes the per-exec cgroup and finally sends `Event::Exit`.
//! - Dropping a `Running` (or calling `kill`) kills the whole tree: cancellation of the caller
//!   (e.g. a dropped RPC) must never leave a process behind.
//! - `Executor::run(cmd, stdin)` = start + write stdin + collect events into an `Outcome`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::mpsc;

use crate::error::{SetupError, SpawnError};
use crate::limits::Limits;

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
}

/// A started program.
pub struct Running {
    pub pid: u32,
    /// Write end of the program's stdin; drop it to close stdin.
    pub stdin: Option<tokio::process::ChildStdin>,
    /// Output events, then exactly one `Event::Exit`.
    pub events: mpsc::Receiver<Event>,
    // private: kill handle, supervisor task, ...
}

impl Running {
    /// Send a signal to the program's process group.
    pub fn signal(&self, signo: i32) -> std::io::Result<()> {
        let _ = signo;
        todo!()
    }
    /// Kill the whole process tree now (process group + cgroup + descendants).
    pub fn kill(&self) {
        todo!()
    }
}

/// Starts programs with isolation. Cheap to share behind an `Arc`.
pub struct Executor {
    // private
}

impl Executor {
    pub fn new(config: ExecutorConfig) -> Result<Self, SetupError> {
        let _ = config;
        todo!()
    }
    pub fn capabilities(&self) -> Capabilities {
        todo!()
    }
    pub fn config(&self) -> &ExecutorConfig {
        todo!()
    }
    /// Number of programs running now.
    pub fn running(&self) -> u32 {
        todo!()
    }
    /// Kill every program this executor started (lease expiry, shutdown).
    pub fn kill_all(&self) {
        todo!()
    }
    pub fn start(&self, cmd: Command) -> Result<Running, SpawnError> {
        let _ = cmd;
        todo!()
    }
    pub async fn run(&self, cmd: Command, stdin: Bytes) -> Result<Outcome, SpawnError> {
        let _ = (cmd, stdin);
        todo!()
    }
}
