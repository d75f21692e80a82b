//! One-time set-up of the sandbox around the agent, before it serves: a fresh root file system,
//! hostname and loopback. Each step fails with its own error naming the path.

pub mod layers;
pub mod net;
pub mod pids;
pub mod rootfs;
pub mod volumes;

#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("mount {what} at {target}: {source}")]
    Mount {
        what: String,
        target: String,
        source: std::io::Error,
    },
    #[error("create {path}: {source}")]
    Create {
        path: String,
        source: std::io::Error,
    },
    #[error("pivot_root into {path}: {source}")]
    PivotRoot {
        path: String,
        source: std::io::Error,
    },
    #[error("sethostname: {0}")]
    Hostname(std::io::Error),
    #[error("loopback up: {0}")]
    Loopback(std::io::Error),
    #[error("user namespace ({what}): {source}")]
    UserNs {
        what: &'static str,
        source: std::io::Error,
    },
    #[error("idmapped mount of {path}: {source}")]
    IdMap {
        path: String,
        source: std::io::Error,
    },
}

impl SetupError {
    /// The start-up step that failed.
    pub fn step(&self) -> sandbox_exec::Step {
        use sandbox_exec::Step;
        match self {
            SetupError::Mount { .. } => Step::Mount,
            SetupError::Create { .. } => Step::RootFile,
            SetupError::PivotRoot { .. } => Step::PivotRoot,
            SetupError::Hostname(_) => Step::Hostname,
            SetupError::Loopback(_) => Step::Loopback,
            SetupError::UserNs { .. } => Step::UserNs,
            SetupError::IdMap { .. } => Step::IdMap,
        }
    }
}
