//! Native client of one agent: one lazily connected HTTP/2 channel, shared by every call.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use hyper_util::rt::TokioIo;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyString};
use pyo3::IntoPyObjectExt;
use sandbox_proto as pb;
use sandbox_proto::agent_client;
use tonic::metadata::MetadataValue;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint, Uri};

use crate::batch::GradeStream;
use crate::errors::{err, from_status, Kind};
use crate::runtime::{self, Later};
use crate::stream::ExecStream;
use crate::values::{AgentInfo, DirEntry, ExecResult, Limits, RunTestsReport};

const MAX_MESSAGE: usize = 1 << 30;
/// HTTP/2 pings find a dead peer (a lost node that never reset its connections) within
/// interval + timeout, instead of at each call's deadline.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(5);
/// Deadline of calls other than exec: an agent that does not answer in this time is lost.
const DEFAULT_CALL_TIMEOUT_S: f64 = 120.0;

#[derive(Clone)]
pub struct Token(MetadataValue<tonic::metadata::Ascii>);

impl tonic::service::Interceptor for Token {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        req.metadata_mut().insert("authorization", self.0.clone());
        Ok(req)
    }
}

pub type Client = agent_client::AgentClient<InterceptedService<Channel, Token>>;

#[pyclass(module = "sandboxes._native", frozen)]
pub struct AgentClient {
    #[pyo3(get)]
    endpoint: String,
    client: Client,
}

/// HTTP/2 receive windows: a stream of bytes (a download from a forwarded port, a file read)
/// runs at the speed of the link, not of a 64 KiB window's round trips.
const STREAM_WINDOW: u32 = 1 << 20;
const CONNECTION_WINDOW: u32 = 8 << 20;

fn channel(endpoint: &str, connect_timeout: Duration) -> PyResult<Channel> {
    let _guard = runtime::handle().enter();
    if let Some(path) = endpoint.strip_prefix("unix://") {
        let path = path.to_string();
        let ep = Endpoint::try_from("http://agent.sandbox")
            .map_err(|e| err(Kind::InvalidRequest, e.to_string()))?
            .connect_timeout(connect_timeout)
            .initial_stream_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW);
        // Unix sockets: a dead agent resets its connections at once, no pings needed.
        Ok(
            ep.connect_with_connector_lazy(tower::service_fn(move |_: Uri| {
                let path = path.clone();
                async move {
                    Ok::<_, std::io::Error>(TokioIo::new(
                        tokio::net::UnixStream::connect(path).await?,
                    ))
                }
            })),
        )
    } else if endpoint.starts_with("http://") {
        let ep = Endpoint::from_shared(endpoint.to_string())
            .map_err(|e| {
                err(
                    Kind::InvalidRequest,
                    format!("bad endpoint {endpoint}: {e}"),
                )
            })?
            .connect_timeout(connect_timeout)
            .initial_stream_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW)
            .tcp_nodelay(true)
            .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
            .keep_alive_timeout(KEEPALIVE_TIMEOUT)
            .keep_alive_while_idle(true);
        Ok(ep.connect_lazy())
    } else {
        Err(err(
            Kind::InvalidRequest,
            format!("endpoint must be unix:///path or http://host:port, got {endpoint}"),
        ))
    }
}

/// Python strings to Rust strings; a string that is not valid UTF-8 (lone surrogates) is a
/// clear invalid-argument error rather than a crash.
fn utf8(s: &Bound<'_, PyAny>, what: &str) -> PyResult<String> {
    let s = s
        .cast::<PyString>()
        .map_err(|_| err(Kind::InvalidRequest, format!("{what} must be a str")))?;
    s.to_str()
        .map(str::to_owned)
        .map_err(|_| err(Kind::InvalidRequest, format!("{what} is not valid UTF-8")))
}

fn utf8_list(items: &Bound<'_, PyList>, what: &str) -> PyResult<Vec<String>> {
    items.iter().map(|i| utf8(&i, what)).collect()
}

fn utf8_map(env: Option<&Bound<'_, pyo3::types::PyDict>>) -> PyResult<HashMap<String, String>> {
    let mut out = HashMap::new();
    if let Some(env) = env {
        for (k, v) in env.iter() {
            out.insert(
                utf8(&k, "environment variable name")?,
                utf8(&v, "environment variable value")?,
            );
        }
    }
    Ok(out)
}

pub fn exec_request(
    argv: &Bound<'_, PyList>,
    env: Option<&Bound<'_, pyo3::types::PyDict>>,
    cwd: &Bound<'_, PyAny>,
    stdin: Vec<u8>,
    limits: Option<&Limits>,
    clear_env: bool,
    keep_descendants: bool,
) -> PyResult<pb::ExecRequest> {
    Ok(pb::ExecRequest {
        argv: utf8_list(argv, "argv")?,
        env: utf8_map(env)?,
        cwd: utf8(cwd, "cwd")?,
        stdin: Bytes::from(stdin),
        limits: limits.map(Limits::to_proto),
        clear_env,
        keep_descendants,
        terminal: None,
        user: String::new(),
    })
}

/// A call's deadline from Python's seconds (None: none).
pub fn deadline(timeout: Option<f64>) -> PyResult<Option<Duration>> {
    match timeout {
        Some(t) if !t.is_finite() || t <= 0.0 => Err(err(
            Kind::InvalidRequest,
            format!("timeout must be positive, got {t}"),
        )),
        Some(t) => Duration::try_from_secs_f64(t)
            .map(Some)
            .map_err(|_| err(Kind::InvalidRequest, "timeout out of range")),
        None => Ok(None),
    }
}

/// One (input, expected_output, check) triple per case.
pub type Cases = Vec<(Vec<u8>, Vec<u8>, String)>;

/// A RunTests request from the arguments Python gives.
#[allow(clippy::too_many_arguments)]
fn run_tests_request(
    language: String,
    source: &Bound<'_, PyAny>,
    tests: Cases,
    limits: Option<&Limits>,
    stop_on_first_failure: bool,
    compare: &str,
    float_tolerance: f64,
    excerpt_bytes: u32,
) -> PyResult<pb::RunTestsRequest> {
    let compare = match compare {
        "exact" => pb::Compare::Exact,
        "whitespace" | "" => pb::Compare::Whitespace,
        "float" => pb::Compare::Float,
        other => {
            return Err(err(
                Kind::InvalidRequest,
                format!("compare must be exact, whitespace or float, got {other:?}"),
            ))
        }
    };
    Ok(pb::RunTestsRequest {
        language,
        source: utf8(source, "source")?,
        tests: tests
            .into_iter()
            .map(|(input, expected_output, check)| pb::TestCase {
                input: input.into(),
                expected_output: expected_output.into(),
                check,
            })
            .collect(),
        limits: limits.map(Limits::to_proto),
        stop_on_first_failure,
        compare: compare as i32,
        float_tolerance,
        excerpt_bytes,
    })
}

/// One submission of a batch: (language, source, tests, limits, stop_on_first_failure, compare,
/// float_tolerance).
type Submission<'py> = (
    String,
    Bound<'py, PyAny>,
    Cases,
    Option<PyRef<'py, Limits>>,
    bool,
    String,
    f64,
);

impl AgentClient {
    fn call<'py, T, F, Fut>(
        &self,
        py: Python<'py>,
        timeout: Option<f64>,
        f: F,
    ) -> PyResult<Bound<'py, PyAny>>
    where
        F: FnOnce(Client) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = PyResult<T>> + Send + 'static,
        T: for<'a> IntoPyObject<'a> + Send + 'static,
    {
        runtime::check_pid()?;
        let client = self.client.clone();
        let deadline = deadline(timeout)?;
        runtime::awaitable(py, async move {
            // Dropping the future (a Python cancel or this deadline) resets the HTTP/2 stream, and
            // the agent kills what the call started.
            match deadline {
                Some(d) => tokio::time::timeout(d, f(client)).await.map_err(|_| {
                    err(
                        Kind::Timeout,
                        format!("no answer from the agent within {d:?}"),
                    )
                })?,
                None => f(client).await,
            }
        })
    }
}

#[pymethods]
impl AgentClient {
    #[new]
    #[pyo3(signature = (endpoint, token, connect_timeout_s = 5.0))]
    fn new(endpoint: String, token: String, connect_timeout_s: f64) -> PyResult<Self> {
        runtime::check_pid()?;
        let header = MetadataValue::try_from(format!("Bearer {token}"))
            .map_err(|_| err(Kind::InvalidRequest, "token must be printable ASCII"))?;
        let timeout = Duration::try_from_secs_f64(connect_timeout_s)
            .map_err(|_| err(Kind::InvalidRequest, "bad connect timeout"))?;
        let client = agent_client::AgentClient::with_interceptor(
            channel(&endpoint, timeout)?,
            Token(header),
        )
        .max_decoding_message_size(MAX_MESSAGE)
        .max_encoding_message_size(MAX_MESSAGE);
        Ok(AgentClient { endpoint, client })
    }

    #[pyo3(signature = (argv, env=None, cwd=None, stdin=Vec::new(), limits=None, clear_env=false, timeout_s=None, keep_descendants=false, user=None))]
    #[allow(clippy::too_many_arguments)]
    fn exec<'py>(
        &self,
        py: Python<'py>,
        argv: &Bound<'py, PyList>,
        env: Option<&Bound<'py, pyo3::types::PyDict>>,
        cwd: Option<&Bound<'py, PyAny>>,
        stdin: Vec<u8>,
        limits: Option<PyRef<'py, Limits>>,
        clear_env: bool,
        timeout_s: Option<f64>,
        keep_descendants: bool,
        user: Option<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let empty = PyString::new(py, "");
        let mut req = exec_request(
            argv,
            env,
            cwd.unwrap_or(empty.as_any()),
            stdin,
            limits.as_deref(),
            clear_env,
            keep_descendants,
        )?;
        req.user = user.unwrap_or_default();
        self.call(py, timeout_s, move |mut c| async move {
            let r = c.exec(req).await.map_err(from_status)?.into_inner();
            Ok(Later(move |py: Python<'_>| {
                Py::new(py, ExecResult::from_proto(py, r)).map(Py::into_any)
            }))
        })
    }

    /// Splices `fd` (a connected TCP socket, whose ownership passes here) to `port` of the
    /// sandbox's loopback, `head` sent first; resolves when the port's side ends. Fails, the fd
    /// closed, when nothing answers on the port (NotFound) or the sandbox shares the host's
    /// network (InvalidRequest).
    fn forward<'py>(
        &self,
        py: Python<'py>,
        port: u16,
        fd: i32,
        head: Vec<u8>,
    ) -> PyResult<Bound<'py, PyAny>> {
        runtime::check_pid()?;
        crate::forward::splice(py, self.client.clone(), port, fd, head)
    }

    /// `terminal`: `(rows, cols)` of a pseudo-terminal the program runs on instead of pipes.
    #[pyo3(signature = (argv, env=None, cwd=None, limits=None, clear_env=false, keep_descendants=false, terminal=None, user=None))]
    #[allow(clippy::too_many_arguments)]
    fn exec_stream<'py>(
        &self,
        py: Python<'py>,
        argv: &Bound<'py, PyList>,
        env: Option<&Bound<'py, pyo3::types::PyDict>>,
        cwd: Option<&Bound<'py, PyAny>>,
        limits: Option<PyRef<'py, Limits>>,
        clear_env: bool,
        keep_descendants: bool,
        terminal: Option<(u32, u32)>,
        user: Option<String>,
    ) -> PyResult<ExecStream> {
        runtime::check_pid()?;
        let empty = PyString::new(py, "");
        let mut req = exec_request(
            argv,
            env,
            cwd.unwrap_or(empty.as_any()),
            Vec::new(),
            limits.as_deref(),
            clear_env,
            keep_descendants,
        )?;
        req.user = user.unwrap_or_default();
        req.terminal = terminal.map(|(rows, cols)| pb::TerminalSize { rows, cols });
        Ok(ExecStream::open(self.client.clone(), req))
    }

    /// `user`: a user of the sandbox the files (and the directories made for them) belong to.
    #[pyo3(signature = (files, user=None))]
    fn write_files<'py>(
        &self,
        py: Python<'py>,
        files: Vec<(String, Vec<u8>, u32)>,
        user: Option<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let user = user.unwrap_or_default();
        let files = files
            .into_iter()
            .map(|(path, data, mode)| pb::FileEntry {
                path,
                data: data.into(),
                mode,
            })
            .collect();
        self.call(py, Some(DEFAULT_CALL_TIMEOUT_S), move |mut c| async move {
            Ok(c.write_files(pb::WriteFilesRequest { files, user })
                .await
                .map_err(from_status)?
                .into_inner()
                .bytes_written)
        })
    }

    /// `length` bytes from `offset` (0: to the end); more than `max_bytes` is a `too_large`
    /// error, checked by the agent before it sends and here again as the bytes arrive.
    fn read_file<'py>(
        &self,
        py: Python<'py>,
        path: String,
        offset: u64,
        length: u64,
        max_bytes: u64,
    ) -> PyResult<Bound<'py, PyAny>> {
        if max_bytes == 0 {
            return Err(err(Kind::InvalidRequest, "max_bytes must be positive"));
        }
        self.call(py, Some(DEFAULT_CALL_TIMEOUT_S), move |mut c| async move {
            let mut stream = c
                .read_file(pb::ReadFileRequest {
                    path: path.clone(),
                    chunk_size: 0,
                    offset,
                    length,
                    max_bytes,
                })
                .await
                .map_err(from_status)?
                .into_inner();
            let mut out = Vec::new();
            while let Some(chunk) = stream.message().await.map_err(from_status)? {
                if out.is_empty() {
                    let rest = chunk.total_size.saturating_sub(offset);
                    let want = if length == 0 { rest } else { rest.min(length) };
                    out.reserve(want.min(max_bytes) as usize);
                }
                if (out.len() + chunk.data.len()) as u64 > max_bytes {
                    return Err(err(
                        Kind::TooLarge,
                        format!("{path}: the agent sent more than the limit of {max_bytes} bytes"),
                    ));
                }
                out.extend_from_slice(&chunk.data);
            }
            Ok(Later(move |py: Python<'_>| {
                Ok(pyo3::types::PyBytes::new(py, &out).into_any().unbind())
            }))
        })
    }

    /// The sandbox's changes (with `volume`, only those of the layered volume at that path)
    /// unpacked into `dest` (an empty directory) as a checkpoint's layer (the `sandbox-layer`
    /// crate): `(sha256 of the stream, the bytes the layer allocates, entries)`. The stream stops
    /// with `too_large` past `max_bytes` of it or `max_entries` entries (0: unbounded).
    #[pyo3(signature = (dest, timeout_s=None, volume=String::new(), max_bytes=0, max_entries=0))]
    fn checkpoint<'py>(
        &self,
        py: Python<'py>,
        dest: String,
        timeout_s: Option<f64>,
        volume: String,
        max_bytes: u64,
        max_entries: u64,
    ) -> PyResult<Bound<'py, PyAny>> {
        let bound = |n: u64| if n == 0 { u64::MAX } else { n };
        let limits = sandbox_layer::Limits {
            max_bytes: bound(max_bytes),
            max_entries: bound(max_entries),
        };
        self.call(py, timeout_s, move |mut c| async move {
            let mut stream = c
                .checkpoint(pb::CheckpointRequest {
                    chunk_size: 0,
                    volume,
                })
                .await
                .map_err(from_status)?
                .into_inner();
            let (tx, rx) = tokio::sync::mpsc::channel(8);
            let unpacking = tokio::task::spawn_blocking(move || {
                sandbox_layer::unpack(
                    sandbox_layer::Chunks::new(rx),
                    std::path::Path::new(&dest),
                    limits,
                )
            });
            let mut received = Ok(());
            loop {
                match stream.message().await {
                    Ok(Some(chunk)) => {
                        if tx.send(chunk.data).await.is_err() {
                            break; // the unpacking failed: its error says why
                        }
                    }
                    Ok(None) => break,
                    Err(status) => {
                        received = Err(from_status(status));
                        break;
                    }
                }
            }
            drop(tx);
            let unpacked = unpacking
                .await
                .map_err(|e| err(Kind::Internal, format!("unpacking the layer: {e}")))?;
            // A bound passed stops the unpacking first: its error is the one that says why.
            let unpacked = match (unpacked, received) {
                (Err(e), _)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::FileTooLarge | std::io::ErrorKind::QuotaExceeded
                    ) =>
                {
                    return Err(err(Kind::TooLarge, e.to_string()));
                }
                (u, r) => {
                    r?;
                    u
                }
            };
            let u = unpacked.map_err(|e| match e.kind() {
                std::io::ErrorKind::InvalidData => err(
                    Kind::Internal,
                    format!("the agent's checkpoint stream: {e}"),
                ),
                _ => err(Kind::Internal, format!("unpacking the layer: {e}")),
            })?;
            Ok((u.digest, u.allocated, u.entries))
        })
    }

    #[pyo3(signature = (path, depth=1))]
    fn list_dir<'py>(
        &self,
        py: Python<'py>,
        path: String,
        depth: u32,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.call(py, Some(DEFAULT_CALL_TIMEOUT_S), move |mut c| async move {
            let entries = c
                .list_dir(pb::ListDirRequest { path, depth })
                .await
                .map_err(from_status)?
                .into_inner()
                .entries;
            Ok(Later(move |py: Python<'_>| {
                entries
                    .into_iter()
                    .map(|e| Py::new(py, DirEntry::from(e)))
                    .collect::<PyResult<Vec<_>>>()?
                    .into_py_any(py)
            }))
        })
    }

    #[pyo3(signature = (path, recursive=false))]
    fn remove<'py>(
        &self,
        py: Python<'py>,
        path: String,
        recursive: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.call(py, Some(DEFAULT_CALL_TIMEOUT_S), move |mut c| async move {
            c.remove(pb::RemoveRequest { path, recursive })
                .await
                .map_err(from_status)?;
            Ok(())
        })
    }

    /// One file operation: `request` is an encoded `FileOpRequest` (common.proto), the answer
    /// an encoded `FileOpResponse`; the caller's own messages, carried as they are.
    fn file_op<'py>(&self, py: Python<'py>, request: Vec<u8>) -> PyResult<Bound<'py, PyAny>> {
        let req = <pb::FileOpRequest as prost::Message>::decode(request.as_slice())
            .map_err(|e| err(Kind::InvalidRequest, format!("a FileOpRequest: {e}")))?;
        self.call(py, Some(DEFAULT_CALL_TIMEOUT_S), move |mut c| async move {
            let out = c.file_op(req).await.map_err(from_status)?.into_inner();
            let bytes = prost::Message::encode_to_vec(&out);
            Ok(Later(move |py: Python<'_>| {
                Ok(pyo3::types::PyBytes::new(py, &bytes).into_any().unbind())
            }))
        })
    }

    fn info<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.call(py, Some(DEFAULT_CALL_TIMEOUT_S), move |mut c| async move {
            let info = c
                .info(pb::InfoRequest {})
                .await
                .map_err(from_status)?
                .into_inner();
            Ok(Later(move |py: Python<'_>| {
                Py::new(py, AgentInfo::from(info)).map(Py::into_any)
            }))
        })
    }

    fn renew_lease<'py>(&self, py: Python<'py>, ttl_s: f64) -> PyResult<Bound<'py, PyAny>> {
        self.call(py, Some(DEFAULT_CALL_TIMEOUT_S), move |mut c| async move {
            Ok(c.renew_lease(pb::RenewLeaseRequest { ttl_s })
                .await
                .map_err(from_status)?
                .into_inner()
                .expires_in_s)
        })
    }

    /// Replaces the sandbox's egress policy (an allow-list, or with `deny` a deny-list); once
    /// this returns, new connections obey it. FAILED_PRECONDITION (InvalidRequest) for a
    /// sandbox started without one.
    #[pyo3(signature = (rules, deny=false))]
    fn set_egress<'py>(
        &self,
        py: Python<'py>,
        rules: Vec<String>,
        deny: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.call(py, Some(DEFAULT_CALL_TIMEOUT_S), move |mut c| async move {
            c.set_egress(pb::SetEgressRequest { rules, deny })
                .await
                .map_err(from_status)?;
            Ok(())
        })
    }

    /// Judge `source` against `tests`, a list of (input, expected_output, check) triples.
    /// `compare` is "exact", "whitespace" (default) or "float".
    #[pyo3(signature = (language, source, tests, limits=None, stop_on_first_failure=false, compare="whitespace", float_tolerance=0.0, excerpt_bytes=0, timeout_s=None))]
    #[allow(clippy::too_many_arguments)]
    fn run_tests<'py>(
        &self,
        py: Python<'py>,
        language: String,
        source: &Bound<'py, PyAny>,
        tests: Cases,
        limits: Option<PyRef<'py, Limits>>,
        stop_on_first_failure: bool,
        compare: &str,
        float_tolerance: f64,
        excerpt_bytes: u32,
        timeout_s: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let req = run_tests_request(
            language,
            source,
            tests,
            limits.as_deref(),
            stop_on_first_failure,
            compare,
            float_tolerance,
            excerpt_bytes,
        )?;
        self.call(py, timeout_s, move |mut c| async move {
            let r = c.run_tests(req).await.map_err(from_status)?.into_inner();
            Ok(Later(move |py: Python<'_>| {
                Py::new(py, RunTestsReport::from_proto(py, r)?).map(Py::into_any)
            }))
        })
    }

    /// Grade many submissions in one call, `parallelism` at a time (0: the sandbox's CPUs); the
    /// stream yields (index, report) as each finishes.
    #[pyo3(signature = (submissions, parallelism=0, timeout_s=None))]
    fn run_tests_batch<'py>(
        &self,
        submissions: Vec<Submission<'py>>,
        parallelism: u32,
        timeout_s: Option<f64>,
    ) -> PyResult<GradeStream> {
        runtime::check_pid()?;
        let submissions = submissions
            .into_iter()
            .map(
                |(language, source, tests, limits, stop, compare, tolerance)| {
                    run_tests_request(
                        language,
                        &source,
                        tests,
                        limits.as_deref(),
                        stop,
                        &compare,
                        tolerance,
                        0,
                    )
                },
            )
            .collect::<PyResult<_>>()?;
        let req = pb::RunTestsBatchRequest {
            submissions,
            parallelism,
        };
        Ok(GradeStream::open(
            self.client.clone(),
            req,
            deadline(timeout_s)?,
        ))
    }

    /// Connections close when the last clone of the client is dropped; nothing to do eagerly.
    fn close(&self) {}
}
