//! Errors of the agent's calls, translated to a gRPC status in exactly one place.

use sandbox_exec::{SpawnError, Step};
use tonic::Status;

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    PermissionDenied(String),
    #[error("{0}")]
    TooLarge(String),
    #[error(transparent)]
    Spawn(#[from] SpawnError),
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
}

impl AgentError {
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        AgentError::Io {
            context: context.into(),
            source,
        }
    }
}

impl From<AgentError> for Status {
    fn from(e: AgentError) -> Status {
        let msg = e.to_string();
        match e {
            AgentError::Invalid(_) => Status::invalid_argument(msg),
            AgentError::NotFound(_) => Status::not_found(msg),
            AgentError::PermissionDenied(_) => Status::permission_denied(msg),
            AgentError::TooLarge(_) => Status::resource_exhausted(msg),
            AgentError::Spawn(SpawnError::Invalid(_)) => Status::invalid_argument(msg),
            AgentError::Spawn(SpawnError::NotFound { .. }) => Status::not_found(msg),
            AgentError::Spawn(SpawnError::Isolation {
                step: Step::Chdir, ..
            }) => Status::invalid_argument(format!("{msg} (cwd must be an existing directory)")),
            AgentError::Spawn(SpawnError::Isolation { .. }) => Status::internal(msg),
            AgentError::Io { ref source, .. } => match source.raw_os_error() {
                Some(libc::ENOENT) => Status::not_found(msg),
                Some(libc::EACCES) | Some(libc::EPERM) => Status::permission_denied(msg),
                Some(libc::EXDEV) | Some(libc::ELOOP) => {
                    Status::invalid_argument(format!("{msg} (path leaves the sandbox)"))
                }
                Some(libc::EISDIR)
                | Some(libc::ENOTDIR)
                | Some(libc::EEXIST)
                | Some(libc::ENOTEMPTY)
                | Some(libc::EINVAL)
                | Some(libc::ENAMETOOLONG) => Status::invalid_argument(msg),
                Some(libc::ENOSPC) | Some(libc::EFBIG) | Some(libc::EDQUOT) => {
                    Status::resource_exhausted(msg)
                }
                _ => Status::internal(msg),
            },
        }
    }
}
