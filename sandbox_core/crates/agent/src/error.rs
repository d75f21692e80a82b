//! Errors of the agent's calls, translated to a gRPC status in exactly one place.
//!
//! Besides its code, a status carries what the caller must not guess from the message text:
//! `sandboxes-error-reason` on RESOURCE_EXHAUSTED (`too_large`: a request or file over a bound;
//! `no_space`: the sandbox's disk is full; `sandbox_limit`: the sandbox's own limit refused the
//! call, `sandboxes-error-limit` names which), and, for a failed step, `sandboxes-error-step` (the
//! step's name, `Step::name`).

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
    /// What a call would make is there already (`ALREADY_EXISTS`).
    #[error("{0}")]
    Exists(String),
    /// The call's caller went away before it ended.
    #[error("the call was cancelled")]
    Cancelled,
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

/// Metadata key of the reason of a RESOURCE_EXHAUSTED status.
pub const REASON_KEY: &str = "sandboxes-error-reason";
/// Metadata key of the isolation step that failed.
pub const STEP_KEY: &str = "sandboxes-error-step";
/// Metadata key of the sandbox limit that refused the call (reason `sandbox_limit`).
pub const LIMIT_KEY: &str = "sandboxes-error-limit";

/// The sandbox's own limit that refused a program's start, if that is why it failed: a fork
/// refused with EAGAIN is the sandbox's process limit (its cgroup's `pids.max`), reached by the
/// programs already running. Not the infrastructure's failure: the caller's to handle.
fn sandbox_limit(e: &SpawnError) -> Option<&'static str> {
    match e {
        SpawnError::Isolation {
            step: Step::Fork,
            source,
        } if source.raw_os_error() == Some(libc::EAGAIN) => Some("pids"),
        _ => None,
    }
}

impl AgentError {
    fn reason(&self) -> Option<&'static str> {
        match self {
            AgentError::TooLarge(_) => Some("too_large"),
            AgentError::Spawn(e) if sandbox_limit(e).is_some() => Some("sandbox_limit"),
            AgentError::Io { source, .. } => match source.raw_os_error() {
                Some(libc::ENOSPC) | Some(libc::EDQUOT) => Some("no_space"),
                Some(libc::EFBIG) => Some("too_large"),
                _ => None,
            },
            _ => None,
        }
    }

    fn step(&self) -> Option<Step> {
        match self {
            AgentError::Spawn(SpawnError::Isolation { step, .. }) => Some(*step),
            _ => None,
        }
    }
}

impl From<AgentError> for Status {
    fn from(e: AgentError) -> Status {
        let (reason, step) = (e.reason(), e.step());
        let limit = match &e {
            AgentError::Spawn(s) => sandbox_limit(s),
            _ => None,
        };
        let mut status = status_of(e);
        if let Some(r) = reason {
            status
                .metadata_mut()
                .insert(REASON_KEY, tonic::metadata::MetadataValue::from_static(r));
        }
        if let Some(l) = limit {
            status
                .metadata_mut()
                .insert(LIMIT_KEY, tonic::metadata::MetadataValue::from_static(l));
        }
        if let Some(step) = step {
            status.metadata_mut().insert(
                STEP_KEY,
                tonic::metadata::MetadataValue::from_static(step.name()),
            );
        }
        status
    }
}

fn status_of(e: AgentError) -> Status {
    let msg = e.to_string();
    match e {
        AgentError::Invalid(_) => Status::invalid_argument(msg),
        AgentError::NotFound(_) => Status::not_found(msg),
        AgentError::PermissionDenied(_) => Status::permission_denied(msg),
        AgentError::TooLarge(_) => Status::resource_exhausted(msg),
        AgentError::Exists(_) => Status::already_exists(msg),
        AgentError::Cancelled => Status::cancelled(msg),
        AgentError::Spawn(SpawnError::Invalid(_)) => Status::invalid_argument(msg),
        AgentError::Spawn(SpawnError::NotFound { .. }) => Status::not_found(msg),
        AgentError::Spawn(SpawnError::Isolation {
            step: Step::Chdir, ..
        }) => Status::invalid_argument(format!("{msg} (cwd must be an existing directory)")),
        AgentError::Spawn(ref s) if sandbox_limit(s).is_some() => Status::resource_exhausted(
            format!("{msg} (the sandbox's process limit is reached: too many programs running)"),
        ),
        AgentError::Spawn(SpawnError::Isolation { .. }) => Status::internal(msg),
        AgentError::Io { ref source, .. } => match source.raw_os_error() {
            Some(libc::ENOENT) => Status::not_found(msg),
            Some(libc::EACCES) | Some(libc::EPERM) => Status::permission_denied(msg),
            Some(libc::EXDEV) | Some(libc::ELOOP) => {
                Status::invalid_argument(format!("{msg} (path leaves the sandbox)"))
            }
            Some(libc::EISDIR)
            | Some(libc::ENOTDIR)
            | Some(libc::ENXIO)
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
