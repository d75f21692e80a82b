//! RunTests: the judge runs every case through the same executor as Exec.

use sandbox_judge::{JudgeError, Scratch};
use sandbox_proto as pb;

use crate::error::AgentError;
use crate::server::{exec, AgentService};

pub async fn run(
    svc: &AgentService,
    req: pb::RunTestsRequest,
) -> Result<pb::RunTestsReport, AgentError> {
    let limits = exec::resolve_limits(req.limits.as_ref(), &svc.executor.config().default_limits)?;
    let scratch = Scratch {
        root: svc.scratch.clone(),
        uid: svc.owner.uid,
        gid: svc.owner.gid,
    };
    sandbox_judge::run_tests(&svc.executor, &scratch, req, limits)
        .await
        .map_err(|e| match e {
            JudgeError::Invalid(m) => AgentError::Invalid(m),
            JudgeError::Scratch { path, source } => {
                AgentError::io(format!("scratch {path}"), source)
            }
        })
}
