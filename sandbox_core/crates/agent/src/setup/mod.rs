//! One-time set-up of the sandbox around the agent, before it serves: a fresh root file system,
//! hostname and loopback. Each step fails with its own error naming the path.

pub mod net;
pub mod rootfs;

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
