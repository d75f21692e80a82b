//! The one exception type of the native module, and the translation of Rust errors into it.
//!
//! `NativeError.kind` is a `Kind` (the values of `sandboxes.errors.ErrorKind`) and `step` a
//! `sandbox_exec::Step` name (the values of `sandboxes.errors.Step`): the Python side maps them
//! to its exception classes without a vocabulary of its own. `error_kinds()` and `steps()` list
//! both, so a test holds the Python enums to them.

use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use sandbox_exec::Step;
use tonic::Code;

pyo3::create_exception!(
    _native,
    NativeError,
    PyException,
    "Raised by every native call; args are (kind, detail, step, limit), named by the attributes \
     `kind`/`detail`/`step`/`limit`."
);

macro_rules! kinds {
    ($( $(#[doc = $doc:literal])* $variant:ident => $name:literal, )*) => {
        /// Kinds of error: `sandboxes.errors.ErrorKind`, whose values are these names.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum Kind {
            $( $(#[doc = $doc])* $variant, )*
        }

        impl Kind {
            pub const ALL: &'static [Kind] = &[$(Kind::$variant),*];

            pub const fn name(self) -> &'static str {
                match self {
                    $(Kind::$variant => $name,)*
                }
            }
        }
    };
}

kinds! {
    /// A wrong request: bad argument, absurd limit, path outside the sandbox, unknown call.
    InvalidRequest => "invalid_request",
    /// A request or file over a bound (an `InvalidRequest` too).
    TooLarge => "too_large",
    /// What the request would make is there already (an `InvalidRequest` too).
    Conflict => "conflict",
    /// The sandbox's disk is full.
    NoSpace => "no_space",
    /// The sandbox's own limit refused the call (which one: `NativeError.limit`).
    SandboxLimit => "sandbox_limit",
    NotFound => "not_found",
    /// A wrong token, or a path the sandbox may not touch.
    Auth => "auth",
    /// The manager's: a caller's quota is used up.
    Quota => "quota",
    /// The manager's: no sandbox became free in time.
    PoolExhausted => "pool_exhausted",
    /// The agent died or its connection broke.
    SandboxLost => "sandbox_lost",
    /// A call passed its deadline.
    Timeout => "timeout",
    /// A sandbox could not be started (`NativeError.step` names the step).
    Launch => "launch",
    /// The manager's: the container engine or cluster API does not answer.
    BackendUnavailable => "backend_unavailable",
    Cancelled => "cancelled",
    /// The manager's: the server is shutting down.
    Draining => "draining",
    Internal => "internal",
}

/// Gives `NativeError` its `kind`, `detail`, `step` and `limit` attributes (views of `args`).
pub fn add_attributes(py: Python<'_>) -> PyResult<()> {
    let cls = py.get_type::<NativeError>();
    let property = py.import("builtins")?.getattr("property")?;
    for (i, name) in ["kind", "detail", "step", "limit"].iter().enumerate() {
        let code = std::ffi::CString::new(format!(
            "lambda self: self.args[{i}] if len(self.args) > {i} else ''"
        ))?;
        let getter = py.eval(&code, None, None)?;
        cls.setattr(*name, property.call1((getter,))?)?;
    }
    Ok(())
}

fn new_err(kind: Kind, detail: String, step: Option<Step>, limit: &str) -> PyErr {
    let step = step.map(Step::name).unwrap_or_default();
    NativeError::new_err((kind.name(), detail, step, limit.to_string()))
}

pub fn err(kind: Kind, detail: impl Into<String>) -> PyErr {
    new_err(kind, detail.into(), None, "")
}

pub fn launch_err(step: Step, detail: impl Into<String>) -> PyErr {
    new_err(Kind::Launch, detail.into(), Some(step), "")
}

/// A failure of the host's own files (a layer written, merged or applied here): its kind by what
/// the system said, `what` naming the work.
pub fn from_io(what: &str, e: std::io::Error) -> PyErr {
    use std::io::ErrorKind as K;
    let kind = match e.kind() {
        K::NotFound => Kind::NotFound,
        K::StorageFull | K::QuotaExceeded => Kind::NoSpace,
        K::FileTooLarge => Kind::TooLarge,
        K::InvalidData | K::InvalidInput => Kind::InvalidRequest,
        _ => Kind::Internal,
    };
    err(kind, format!("{what}: {e}"))
}

/// The agent's reason for a RESOURCE_EXHAUSTED status (`sandboxes-error-reason`), which the status
/// code alone does not tell.
const REASON_KEY: &str = "sandboxes-error-reason";
/// The step that failed (`sandboxes-error-step`, a `Step` name).
const STEP_KEY: &str = "sandboxes-error-step";
/// The sandbox limit that refused the call (`sandboxes-error-limit`).
const LIMIT_KEY: &str = "sandboxes-error-limit";

pub fn from_status(s: tonic::Status) -> PyErr {
    let meta = |key| {
        s.metadata()
            .get(key)
            .and_then(|v| v.to_str().ok())
            .map(String::from)
    };
    let reason = meta(REASON_KEY);
    let step = meta(STEP_KEY).and_then(|n| Step::from_name(&n));
    let limit = meta(LIMIT_KEY).unwrap_or_default();
    let kind = match (s.code(), reason.as_deref()) {
        (Code::ResourceExhausted, Some("no_space")) => Kind::NoSpace,
        (Code::ResourceExhausted, Some("sandbox_limit")) => Kind::SandboxLimit,
        (code, _) => kind_of_code(code),
    };
    let message = match (s.code(), s.message()) {
        // An agent older than this client: it does not know the call.
        (Code::Unimplemented, "") => {
            "the agent does not serve this call (is it older than the client?)".into()
        }
        (_, m) => m.to_string(),
    };
    new_err(kind, message, step, &limit)
}

/// The kind of an agent's status code. Where it differs from the server's table
/// (`sandboxes.status`), it is on purpose: the agent is one sandbox, so what the server would
/// call its backend or a quota is here the sandbox itself.
fn kind_of_code(code: Code) -> Kind {
    match code {
        Code::InvalidArgument
        | Code::OutOfRange
        | Code::FailedPrecondition
        | Code::Unimplemented => Kind::InvalidRequest,
        Code::AlreadyExists => Kind::Conflict,
        Code::NotFound => Kind::NotFound,
        Code::PermissionDenied | Code::Unauthenticated => Kind::Auth,
        Code::DeadlineExceeded => Kind::Timeout,
        // Without a reason: the agent's own bounds, or the transport's message size limit, i.e.
        // the request's size (an agent has no quotas).
        Code::ResourceExhausted => Kind::TooLarge,
        // The agent never answers Cancelled: this is the transport's "operation was canceled", a
        // request caught on a connection that closed under it, i.e. the agent went away.
        // UNAVAILABLE (the server's `BackendUnavailable`) is here the agent's connection gone:
        // the sandbox is lost.
        Code::Cancelled | Code::Unavailable | Code::Unknown | Code::Aborted => Kind::SandboxLost,
        _ => Kind::Internal,
    }
}

/// Every `Kind` name (`sandboxes.errors.ErrorKind` holds the same values).
#[pyfunction]
pub fn error_kinds() -> Vec<&'static str> {
    Kind::ALL.iter().map(|k| k.name()).collect()
}

/// Every `Step` name (`sandboxes.errors.Step` holds the same values).
#[pyfunction]
pub fn steps() -> Vec<&'static str> {
    Step::ALL.iter().map(|s| s.name()).collect()
}

/// The kind the native client gives a status of gRPC code `code` that carries no reason (a test
/// holds it to `sandboxes.status`'s table and the differences it names).
#[pyfunction]
pub fn kind_of_status_code(code: i32) -> &'static str {
    kind_of_code(Code::from_i32(code)).name()
}
