//! RunTests and RunTestsBatch: the judge runs every case through the same executor as Exec.

use futures::StreamExt;
use sandbox_exec::Limits;
use sandbox_judge::JudgeError;
use sandbox_proto as pb;

use crate::error::AgentError;
use crate::server::{exec, AgentService, BoxStream};

/// What the agent keeps of the sandbox's pids and memory for itself, its zygote and its files.
const AGENT_PIDS: u64 = 32;
const AGENT_MEMORY: u64 = 64 << 20;

/// A batch's gradings run side by side in one sandbox: each case gets at most its part of the
/// sandbox's pids and memory (less the agent's reserve), so that one that forks or allocates
/// without bound meets its own limit and not the sandbox's, leaving the others theirs.
#[derive(Clone, Copy)]
struct Share {
    pids: Option<u32>,
    memory: Option<u64>,
}

impl Share {
    fn of(parallelism: usize) -> Share {
        let part = |total: Option<u64>, reserve: u64| {
            total.map(|t| (t.saturating_sub(reserve) / parallelism as u64).max(1))
        };
        Share {
            pids: part(sandbox_exec::cgroup::enclosing_pids_max(), AGENT_PIDS)
                .map(|p| p.min(u32::MAX as u64) as u32),
            memory: part(sandbox_exec::cgroup::enclosing_memory_max(), AGENT_MEMORY),
        }
    }

    fn bound(self, limits: &mut Limits) {
        if let Some(p) = self.pids {
            limits.max_pids = limits.max_pids.min(p);
        }
        if let Some(m) = self.memory {
            limits.memory_bytes = limits.memory_bytes.min(m);
        }
    }
}

fn judge_error(e: JudgeError) -> AgentError {
    match e {
        JudgeError::Invalid(m) => AgentError::Invalid(m),
        JudgeError::Scratch { path, source } => AgentError::io(format!("scratch {path}"), source),
    }
}

pub async fn run(
    svc: &AgentService,
    req: pb::RunTestsRequest,
) -> Result<pb::RunTestsReport, AgentError> {
    let limits = exec::resolve_limits(req.limits.as_ref(), &svc.executor.config().default_limits)?;
    sandbox_judge::run_tests(&svc.executor, &svc.scratch, req, limits)
        .await
        .map_err(judge_error)
}

/// Validates the whole batch, then grades `parallelism` submissions at a time (0: one; at most the
/// sandbox's CPUs), each as `run` would, answering in the order they finish. One at a time is the
/// default because programs of submissions side by side share the sandbox's user: one could
/// signal the other. The stream owns the running gradings: when the caller goes away it is
/// dropped, and with it their programs.
pub fn batch(
    svc: &AgentService,
    req: pb::RunTestsBatchRequest,
) -> Result<BoxStream<pb::RunTestsBatchResult>, AgentError> {
    sandbox_judge::validate_batch(&req.submissions).map_err(judge_error)?;
    let defaults = &svc.executor.config().default_limits;
    let jobs: Vec<(u32, pb::RunTestsRequest, Limits)> = req
        .submissions
        .into_iter()
        .enumerate()
        .map(|(i, sub)| {
            let limits =
                exec::resolve_limits(sub.limits.as_ref(), defaults).map_err(|e| match e {
                    AgentError::Invalid(m) => AgentError::Invalid(format!("submission {i}: {m}")),
                    other => other,
                })?;
            Ok((i as u32, sub, limits))
        })
        .collect::<Result<_, AgentError>>()?;
    let parallelism = (req.parallelism as usize).clamp(1, sandbox_exec::cgroup::enclosing_cpus());
    // One at a time, a case has the limits one RunTests call gives it.
    let share = (parallelism > 1).then(|| Share::of(parallelism));
    let (executor, scratch) = (svc.executor.clone(), svc.scratch.clone());
    let results = futures::stream::iter(jobs)
        .map(move |(index, sub, mut limits)| {
            if let Some(share) = share {
                share.bound(&mut limits);
            }
            let (executor, scratch) = (executor.clone(), scratch.clone());
            async move {
                let cases = sub.tests.len();
                let report = sandbox_judge::run_tests(&executor, &scratch, sub, limits)
                    .await
                    .unwrap_or_else(|e| sandbox_judge::unjudged(cases, judge_error(e).to_string()));
                Ok(pb::RunTestsBatchResult {
                    index,
                    report: Some(report),
                })
            }
        })
        .buffer_unordered(parallelism);
    Ok(Box::pin(results))
}
