//! Why the agent could not start: one variant per start-up step, each carrying what it worked on
//! and the OS error, so the manager is told which step failed (`step`) without reading the
//! agent's stderr. `report` writes it to the readiness channel as a failure record
//! (`sandbox_exec::readiness`).

use std::io;
use std::os::fd::FromRawFd;
use std::path::PathBuf;

use sandbox_exec::{readiness, Step};

use crate::setup::SetupError;

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("read token {from}: {source}")]
    Token { from: String, source: io::Error },
    #[error("{0}")]
    BadToken(&'static str),
    /// The flags are wrong or contradict each other.
    #[error("{0}")]
    Flags(String),
    /// Hostname, loopback, and every step of building the root file system.
    #[error(transparent)]
    Setup(#[from] SetupError),
    #[error("the programs' user namespace: {0}")]
    UserNs(sandbox_exec::SetupError),
    #[error("listen on {spec}: {source}")]
    Listen { spec: String, source: io::Error },
    #[error("egress: {0}")]
    Egress(String),
    #[error("egress {what}: {source}")]
    EgressIo { what: String, source: io::Error },
    #[error("capabilities: {0}")]
    Capabilities(sandbox_exec::SetupError),
    #[error("create {}: {source}", path.display())]
    WorkDir { path: PathBuf, source: io::Error },
    #[error("{what}: {source}")]
    Runtime {
        what: &'static str,
        source: io::Error,
    },
    #[error(transparent)]
    Executor(sandbox_exec::SetupError),
}

impl StartError {
    /// The step that failed.
    pub fn step(&self) -> Step {
        match self {
            StartError::Token { .. } | StartError::BadToken(_) => Step::Token,
            StartError::Flags(_) => Step::Flags,
            StartError::Setup(e) => e.step(),
            StartError::UserNs(_) => Step::UserNs,
            StartError::Listen { .. } => Step::Listen,
            StartError::Egress(_) | StartError::EgressIo { .. } => Step::Egress,
            StartError::Capabilities(_) => Step::Capabilities,
            StartError::WorkDir { .. } => Step::WorkDir,
            StartError::Runtime { .. } => Step::Runtime,
            StartError::Executor(e) => match e {
                sandbox_exec::SetupError::Seccomp(_) => Step::Seccomp,
                sandbox_exec::SetupError::Cgroup { .. } => Step::CreateCgroup,
                sandbox_exec::SetupError::UserNamespace { .. }
                | sandbox_exec::SetupError::UserNs { .. } => Step::UserNs,
                sandbox_exec::SetupError::Reaper(_) => Step::Executor,
            },
        }
    }

    /// Tells the manager: the failure record on the readiness channel (`ready_fd`, when the
    /// agent has one) and the message on stderr.
    pub fn report(&self, ready_fd: Option<i32>) {
        eprintln!("sandbox-agent: {} (step {})", self, self.step());
        if let Some(fd) = ready_fd {
            // SAFETY: the launcher handed us the write end of its readiness channel; the agent
            // exits right after this, so nothing else uses the fd.
            let mut ready = std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(fd) });
            let record = readiness::failure_record(self.step(), &self.to_string());
            let _ = io::Write::write_all(&mut *ready, &record);
        }
    }
}
