//! The tonic service: one module per group of verbs, this file only dispatches.

mod accounts;
mod exec;
mod files;
pub mod forward;
mod run_tests;
mod stream;

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::Stream;
use sandbox_exec::Executor;
use sandbox_proto as pb;
use sandbox_proto::agent_server::Agent;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use crate::error::AgentError;
use crate::lease::{Lease, MAX_TTL};
use crate::paths::Roots;
pub use accounts::Accounts;
pub use files::Owner;

pub struct AgentService {
    pub executor: Arc<Executor>,
    pub lease: Arc<Lease>,
    pub roots: Arc<Roots>,
    /// The users programs may run as (`ExecRequest.user`).
    pub accounts: Accounts,
    /// Where run_tests puts each call's files (the sandbox's /tmp), owned by the programs' user.
    pub scratch: Arc<sandbox_judge::Scratch>,
    pub namespaces: Vec<String>,
    pub started: Instant,
    pub total_execs: AtomicU64,
    /// Permits of `Forward` (None: refused, the agent shares the outside's network namespace).
    pub forwards: Option<Arc<tokio::sync::Semaphore>>,
    /// The egress proxy, its policy and counts (a sandbox whose network is an egress policy).
    pub egress: Option<Arc<crate::egress::Proxy>>,
}

pub(crate) type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

/// A call's life, as the blocking work it started sees it: dropped (the caller went away, so
/// tonic dropped the call's future) it tells that work to stop.
#[derive(Default)]
struct Call(Arc<AtomicBool>);

impl Call {
    fn flag(&self) -> Flag {
        Flag(self.0.clone())
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// The flag a `Call` sets when it ends.
struct Flag(Arc<AtomicBool>);

impl std::ops::Deref for Flag {
    type Target = AtomicBool;
    fn deref(&self) -> &AtomicBool {
        &self.0
    }
}

/// Runs blocking file work off the async workers.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, AgentError> + Send + 'static,
) -> Result<T, Status> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Status::internal(format!("file task failed: {e}")))?
        .map_err(Status::from)
}

fn cgroup_memory() -> u64 {
    for p in [
        "/sys/fs/cgroup/memory/memory.usage_in_bytes",
        "/sys/fs/cgroup/memory.current",
    ] {
        if let Ok(s) = std::fs::read_to_string(p) {
            if let Ok(v) = s.trim().parse() {
                return v;
            }
        }
    }
    0
}

#[tonic::async_trait]
impl Agent for AgentService {
    async fn exec(
        &self,
        request: Request<pb::ExecRequest>,
    ) -> Result<Response<pb::ExecResult>, Status> {
        let req = request.into_inner();
        if req.terminal.is_some() {
            return Err(Status::invalid_argument(
                "a terminal is interactive: start it with ExecStream",
            ));
        }
        let mut cmd = exec::command(
            &req,
            &self.executor.config().default_limits,
            self.roots.work_dir(),
        )?;
        self.accounts.apply(&mut cmd, &req.user)?;
        self.total_execs.fetch_add(1, Ordering::Relaxed);
        // If the caller goes away this future is dropped, and with it the running program.
        match self.executor.run(cmd, req.stdin).await {
            Ok(outcome) => Ok(Response::new(exec::result(outcome, pb::ExecPath::Spawn))),
            Err(e) => match exec::refused_by_kernel(&e, &req.argv[0]) {
                Some(result) => Ok(Response::new(result)),
                None => Err(AgentError::from(e).into()),
            },
        }
    }

    type ExecStreamStream = BoxStream<pb::ExecEvent>;

    async fn exec_stream(
        &self,
        request: Request<Streaming<pb::ExecInput>>,
    ) -> Result<Response<Self::ExecStreamStream>, Status> {
        let (tx, rx) = mpsc::channel(64);
        self.total_execs.fetch_add(1, Ordering::Relaxed);
        stream::start(
            self.executor.clone(),
            self.accounts,
            self.roots.work_dir().to_path_buf(),
            request.into_inner(),
            tx,
        )
        .await?;
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    type CheckpointStream = BoxStream<pb::FileChunk>;

    async fn checkpoint(
        &self,
        request: Request<pb::CheckpointRequest>,
    ) -> Result<Response<Self::CheckpointStream>, Status> {
        let Some(changes) = crate::setup::layers::changes() else {
            return Err(Status::failed_precondition(
                "this sandbox has no file system of its own to checkpoint (its agent runs without --new-root)",
            ));
        };
        let req = request.into_inner();
        let chunk = match req.chunk_size as usize {
            0 => crate::checkpoint::DEFAULT_CHUNK,
            n => n.clamp(4096, files::MAX_CHUNK),
        };
        let volume = (!req.volume.is_empty()).then(|| std::path::PathBuf::from(&req.volume));
        if let Some(at) = &volume {
            if !changes.places.iter().any(|p| p.volume && &p.path == at) {
                return Err(Status::not_found(format!(
                    "no layered volume at {}",
                    at.display()
                )));
            }
        }
        let (tx, rx) = mpsc::channel(4);
        tokio::task::spawn_blocking(move || {
            let mut out = crate::checkpoint::Chunks::new(tx.clone(), chunk);
            let written = crate::checkpoint::write(changes, volume.as_deref(), &mut out)
                .and_then(|_| std::io::Write::flush(&mut out));
            if let Err(e) = written {
                // A caller that went away needs no answer.
                if e.kind() != std::io::ErrorKind::BrokenPipe {
                    let _ = tx.blocking_send(Err(Status::internal(format!("checkpoint: {e}"))));
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn write_files(
        &self,
        request: Request<pb::WriteFilesRequest>,
    ) -> Result<Response<pb::WriteFilesResponse>, Status> {
        let req = request.into_inner();
        let (roots, accounts) = (self.roots.clone(), self.accounts);
        let bytes_written = blocking(move || {
            let owner = accounts.owner(&req.user)?;
            files::write_files(&roots, owner, req.files)
        })
        .await?;
        Ok(Response::new(pb::WriteFilesResponse { bytes_written }))
    }

    type ReadFileStream = BoxStream<pb::FileChunk>;

    async fn read_file(
        &self,
        request: Request<pb::ReadFileRequest>,
    ) -> Result<Response<Self::ReadFileStream>, Status> {
        let req = request.into_inner();
        let chunk = match req.chunk_size as usize {
            0 => files::DEFAULT_CHUNK,
            n => n.min(files::MAX_CHUNK),
        };
        let roots = self.roots.clone();
        let (path, offset, length, max) = (req.path.clone(), req.offset, req.length, req.max_bytes);
        let plan = blocking(move || files::open_read(&roots, &path, offset, length, max)).await?;
        let (tx, rx) = mpsc::channel(4);
        tokio::task::spawn_blocking(move || {
            // Never more than the plan's length, even if the file grows meanwhile.
            let end = plan.offset + plan.len;
            let mut at = plan.offset;
            loop {
                let want = chunk.min((end - at) as usize);
                let data = match files::read_chunk(&plan.file, at, want) {
                    Ok(d) => d,
                    Err(e) => {
                        let _ = tx.blocking_send(Err(e.into()));
                        return;
                    }
                };
                let n = data.len() as u64;
                // An empty read still answers with one (empty) chunk.
                if n == 0 && at > plan.offset {
                    return;
                }
                if tx
                    .blocking_send(Ok(pb::FileChunk {
                        offset: at,
                        total_size: plan.size,
                        data: data.into(),
                    }))
                    .is_err()
                {
                    return;
                }
                at += n;
                if n == 0 || at >= end {
                    return;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn list_dir(
        &self,
        request: Request<pb::ListDirRequest>,
    ) -> Result<Response<pb::ListDirResponse>, Status> {
        let req = request.into_inner();
        let (roots, accounts) = (self.roots.clone(), self.accounts);
        let call = Call::default();
        let cancel = call.flag();
        let entries = blocking(move || {
            files::list_dir(&roots, &accounts.ids(), &req.path, req.depth, &cancel)
        })
        .await?;
        Ok(Response::new(pb::ListDirResponse { entries }))
    }

    async fn file_op(
        &self,
        request: Request<pb::FileOpRequest>,
    ) -> Result<Response<pb::FileOpResponse>, Status> {
        let req = request.into_inner();
        let (roots, accounts) = (self.roots.clone(), self.accounts);
        let call = Call::default();
        let cancel = call.flag();
        let out = blocking(move || files::file_op(&roots, &accounts, req, &cancel)).await?;
        Ok(Response::new(out))
    }

    async fn remove(
        &self,
        request: Request<pb::RemoveRequest>,
    ) -> Result<Response<pb::RemoveResponse>, Status> {
        let req = request.into_inner();
        let roots = self.roots.clone();
        blocking(move || files::remove(&roots, &req.path, req.recursive)).await?;
        Ok(Response::new(pb::RemoveResponse {}))
    }

    async fn info(
        &self,
        _request: Request<pb::InfoRequest>,
    ) -> Result<Response<pb::InfoResponse>, Status> {
        let caps = self.executor.capabilities();
        Ok(Response::new(pb::InfoResponse {
            version: crate::VERSION.to_string(),
            capabilities: Some(pb::Capabilities {
                cgroup_version: caps.cgroup_version.to_string(),
                seccomp: caps.seccomp,
                namespaces: self.namespaces.clone(),
                languages: sandbox_judge::Language::available()
                    .into_iter()
                    .map(String::from)
                    .collect(),
                zygote: self.executor.zygote_enabled(),
                sandbox_uid: caps.uid,
                sandbox_gid: caps.gid,
                landlock: sandbox_exec::landlock::abi() > 0,
            }),
            usage: Some(pb::Usage {
                running_execs: self.executor.running(),
                total_execs: self.total_execs.load(Ordering::Relaxed),
                memory_bytes: cgroup_memory(),
                uptime_s: self.started.elapsed().as_secs_f64(),
                egress_allowed: self
                    .egress
                    .as_ref()
                    .map_or(0, |p| p.counters.allowed.load(Ordering::Relaxed)),
                egress_refused: self
                    .egress
                    .as_ref()
                    .map_or(0, |p| p.counters.refused.load(Ordering::Relaxed)),
            }),
            work_dir: self.roots.work_dir().display().to_string(),
            default_limits: Some(exec::limits_message(&self.executor.config().default_limits)),
        }))
    }

    async fn renew_lease(
        &self,
        request: Request<pb::RenewLeaseRequest>,
    ) -> Result<Response<pb::RenewLeaseResponse>, Status> {
        let ttl = request.into_inner().ttl_s;
        if !ttl.is_finite() || ttl <= 0.0 || ttl > MAX_TTL.as_secs_f64() {
            return Err(Status::invalid_argument(format!(
                "lease ttl must be in (0, {}] seconds, got {ttl}",
                MAX_TTL.as_secs()
            )));
        }
        let granted = self.lease.renew(Duration::from_secs_f64(ttl));
        Ok(Response::new(pb::RenewLeaseResponse {
            expires_in_s: granted.as_secs_f64(),
        }))
    }

    type ForwardStream = BoxStream<pb::ForwardOutput>;

    async fn forward(
        &self,
        request: Request<Streaming<pb::ForwardInput>>,
    ) -> Result<Response<Self::ForwardStream>, Status> {
        let Some(permits) = &self.forwards else {
            return Err(Status::failed_precondition(
                "this sandbox shares the host's network: its ports are the host's and are not \
                 forwarded",
            ));
        };
        let (tx, rx) = mpsc::channel(4);
        forward::start(permits.clone(), request.into_inner(), tx).await?;
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn set_egress(
        &self,
        request: Request<pb::SetEgressRequest>,
    ) -> Result<Response<pb::SetEgressResponse>, Status> {
        let Some(proxy) = &self.egress else {
            return Err(Status::failed_precondition(
                "this sandbox was started without an egress policy (its network is none or the \
                 outside's): its egress cannot change",
            ));
        };
        let req = request.into_inner();
        let policy = crate::egress::policy::Policy::parse_as(&req.rules, req.deny)
            .map_err(Status::invalid_argument)?;
        proxy
            .set_policy(policy)
            .await
            .map_err(Status::unavailable)?;
        proxy.listen_allowed();
        Ok(Response::new(pb::SetEgressResponse {}))
    }

    async fn run_tests(
        &self,
        request: Request<pb::RunTestsRequest>,
    ) -> Result<Response<pb::RunTestsReport>, Status> {
        let req = request.into_inner();
        self.total_execs
            .fetch_add(req.tests.len() as u64, Ordering::Relaxed);
        let report = run_tests::run(self, req).await?;
        Ok(Response::new(report))
    }

    type RunTestsBatchStream = BoxStream<pb::RunTestsBatchResult>;

    async fn run_tests_batch(
        &self,
        request: Request<pb::RunTestsBatchRequest>,
    ) -> Result<Response<Self::RunTestsBatchStream>, Status> {
        let req = request.into_inner();
        let cases: usize = req.submissions.iter().map(|s| s.tests.len()).sum();
        let results = run_tests::batch(self, req)?;
        self.total_execs.fetch_add(cases as u64, Ordering::Relaxed);
        Ok(Response::new(results))
    }
}
