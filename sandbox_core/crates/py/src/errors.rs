//! The one exception type of the native module, and the translation of Rust errors into it.

use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use tonic::Code;

pyo3::create_exception!(
    _native,
    NativeError,
    PyException,
    "Raised by every native call; args are (kind, detail, step) and `kind`/`detail`/`step` name them."
);

/// Gives `NativeError` its `kind`, `detail` and `step` attributes (views of `args`).
pub fn add_attributes(py: Python<'_>) -> PyResult<()> {
    let cls = py.get_type::<NativeError>();
    let property = py.import("builtins")?.getattr("property")?;
    for (i, name) in ["kind", "detail", "step"].iter().enumerate() {
        let code = std::ffi::CString::new(format!(
            "lambda self: self.args[{i}] if len(self.args) > {i} else ''"
        ))?;
        let getter = py.eval(&code, None, None)?;
        cls.setattr(*name, property.call1((getter,))?)?;
    }
    Ok(())
}

pub fn err(kind: &str, detail: impl Into<String>) -> PyErr {
    NativeError::new_err((kind.to_string(), detail.into(), String::new()))
}

pub fn launch_err(step: &str, detail: impl Into<String>) -> PyErr {
    NativeError::new_err(("launch".to_string(), detail.into(), step.to_string()))
}

/// The agent's reason for a RESOURCE_EXHAUSTED status (`sandbox-error-reason`), which the status
/// code alone does not tell.
const REASON_KEY: &str = "sandbox-error-reason";
/// The isolation step that failed (`sandbox-error-step`).
const STEP_KEY: &str = "sandbox-error-step";

pub fn from_status(s: tonic::Status) -> PyErr {
    let meta = |key| {
        s.metadata()
            .get(key)
            .and_then(|v| v.to_str().ok())
            .map(String::from)
    };
    let (reason, step) = (meta(REASON_KEY), meta(STEP_KEY).unwrap_or_default());
    let kind = match (s.code(), reason.as_deref()) {
        (Code::ResourceExhausted, Some("no_space")) => "no_space",
        // The agent's own bounds, and the transport's message size limit, are the request's size.
        (Code::ResourceExhausted, _) => "too_large",
        (code, _) => kind_of_code(code),
    };
    let message = match (s.code(), s.message()) {
        // An agent older than this client: it does not know the call.
        (Code::Unimplemented, "") => {
            "the agent does not serve this call (is it older than the client?)".into()
        }
        (_, m) => m.to_string(),
    };
    NativeError::new_err((kind.to_string(), message, step))
}

fn kind_of_code(code: Code) -> &'static str {
    match code {
        Code::InvalidArgument | Code::OutOfRange => "invalid_argument",
        Code::NotFound => "not_found",
        Code::PermissionDenied => "permission_denied",
        Code::Unauthenticated => "unauthenticated",
        Code::DeadlineExceeded => "deadline_exceeded",
        // The agent never answers Cancelled: this is the transport's "operation was canceled", a
        // request caught on a connection that closed under it, i.e. the agent went away.
        Code::Cancelled => "unavailable",
        Code::FailedPrecondition | Code::AlreadyExists => "failed_precondition",
        // The agent died or the connection broke: the sandbox is lost.
        Code::Unavailable | Code::Unknown | Code::Aborted => "unavailable",
        _ => "internal",
    }
}
