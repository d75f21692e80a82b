//! Typed errors: one variant per isolation step, each carrying the OS error,
//! so an operator can tell which step failed.

pub use crate::step::Step;

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
    #[error("isolation step {step} failed: {source}")]
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
