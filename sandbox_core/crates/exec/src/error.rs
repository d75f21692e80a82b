//! Typed errors: one variant per isolation step, each carrying the OS error,
//! so an operator can tell which step failed.

/// One step of starting a sandboxed program. A failure names its step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Step {
    Pipe = 1,
    Fork = 2,
    JoinCgroup = 3,
    SetSid = 4,
    Rlimit = 5,
    Chdir = 6,
    SetGroups = 7,
    SetGid = 8,
    SetUid = 9,
    NoNewPrivs = 10,
    Seccomp = 11,
    Dup2 = 12,
    Exec = 13,
    CreateCgroup = 14,
    CgroupLimit = 15,
    Landlock = 16,
    /// Entering the sandbox's user namespace (`ExecutorConfig::user_namespace`).
    UserNs = 17,
}

/// Why a program could not be started.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    /// The request itself is wrong (empty argv, NUL in a string, limit out of range, ...).
    #[error("invalid request: {0}")]
    Invalid(String),
    /// The program does not exist or is not executable.
    #[error("cannot execute {program}: {source}")]
    NotFound {
        program: String,
        source: std::io::Error,
    },
    /// An isolation step failed.
    #[error("isolation step {step:?} failed: {source}")]
    Isolation { step: Step, source: std::io::Error },
}

/// Why the executor could not be built.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("seccomp filter: {0}")]
    Seccomp(String),
    #[error("cgroup setup at {path}: {source}")]
    Cgroup {
        path: String,
        source: std::io::Error,
    },
    #[error("reaper: {0}")]
    Reaper(std::io::Error),
    #[error("user namespace fd at {fd}: {source}")]
    UserNamespace { fd: i32, source: std::io::Error },
    #[error("user namespace ({what}): {source}")]
    UserNs {
        what: &'static str,
        source: std::io::Error,
    },
}
