//! The tokio runtime behind every awaitable of the module, and the bridge from a Rust future to
//! an asyncio future. Refuses to run in a forked child: the runtime's threads did not survive
//! the fork.
//!
//! The bridge is one tokio task per call: it runs the future, then hands the output, unconverted,
//! to the event loop's completion queue (see `completion`), which the loop thread drains. A
//! generic bridge costs two more thread hand-offs per call (a second task, and a blocking-pool
//! thread to set the result), each a wake-up of another thread, which is most of a call's
//! overhead on a small VM. Cancelling the asyncio future drops the Rust future (which resets its
//! HTTP/2 stream, so the agent stops what the call started).

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Mutex, OnceLock};

use futures::FutureExt;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyCFunction;
use pyo3::{IntoPyObjectExt, PyResult};
use tokio::sync::oneshot;

use crate::completion::{Convert, Deliver, Finished};

static OWNER_PID: OnceLock<u32> = OnceLock::new();

pub fn init() {
    OWNER_PID.get_or_init(std::process::id);
    // One worker: a call's tasks (the call, the connection's I/O) then run on one thread instead
    // of waking a second one to steal them, which cost ~35 us of CPU per call on a 2-CPU VM.
    // Throughput is bound by the Python thread and the agents, not by this thread (burst bench:
    // the same execs/s). Blocking work (a launch's start) goes to the blocking pool.
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder
        .worker_threads(1)
        .enable_all()
        .thread_name("sandboxes-native");
    pyo3_async_runtimes::tokio::init(builder);
}

pub fn check_pid() -> PyResult<()> {
    match OWNER_PID.get() {
        Some(&pid) if pid != std::process::id() => Err(crate::errors::err(
            crate::errors::Kind::InvalidRequest,
            "sandboxes._native cannot be used in a forked child process; create clients after fork",
        )),
        _ => Ok(()),
    }
}

pub fn handle() -> &'static tokio::runtime::Runtime {
    pyo3_async_runtimes::tokio::get_runtime()
}

/// A call's result turned into a Python object only when it is set on its future, on the loop's
/// thread (see `completion`): the runtime thread never converts, so never takes the GIL.
pub struct Later<F>(pub F);

impl<'py, F> IntoPyObject<'py> for Later<F>
where
    F: FnOnce(Python<'py>) -> PyResult<Py<PyAny>>,
{
    type Target = PyAny;
    type Output = Bound<'py, PyAny>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        (self.0)(py).map(|o| o.into_bound(py))
    }
}

/// Run `fut` on the runtime; an asyncio future (of the running loop) of its output.
pub fn awaitable<'py, F, T>(py: Python<'py>, fut: F) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = PyResult<T>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    static GET_RUNNING_LOOP: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let event_loop = GET_RUNNING_LOOP
        .get_or_try_init(py, || {
            py.import("asyncio")?
                .getattr("get_running_loop")
                .map(Bound::unbind)
        })?
        .bind(py)
        .call0()?;
    let py_fut = event_loop.call_method0(pyo3::intern!(py, "create_future"))?;
    let (cancel_tx, cancel_rx) = oneshot::channel::<()>();
    let cancel_tx = Mutex::new(Some(cancel_tx));
    let on_done = PyCFunction::new_closure(py, None, None, move |args, _kwargs| -> PyResult<()> {
        let fut = args.get_item(0)?;
        if fut.call_method0("cancelled")?.is_truthy()? {
            if let Some(tx) = cancel_tx.lock().ok().and_then(|mut t| t.take()) {
                let _ = tx.send(());
            }
        }
        Ok(())
    })?;
    py_fut.call_method1(pyo3::intern!(py, "add_done_callback"), (on_done,))?;
    let deliver = Deliver::for_loop(py, &event_loop)?;
    let fut_ref = py_fut.clone().unbind();
    handle().spawn(async move {
        // Only a cancel cancels: the sender is dropped unused when the future completes.
        let cancelled = async {
            if cancel_rx.await.is_err() {
                std::future::pending::<()>().await
            }
        };
        let outcome = tokio::select! {
            r = AssertUnwindSafe(fut).catch_unwind() => r,
            () = cancelled => return,
        };
        let value = match outcome {
            Ok(Ok(v)) => Ok(Box::new(move |py: Python<'_>| v.into_py_any(py)) as Convert),
            Ok(Err(e)) => Err(e),
            Err(panic) => Err(crate::errors::err(
                crate::errors::Kind::Internal,
                format!("native call panicked: {}", panic_message(&panic)),
            )),
        };
        deliver.deliver(Finished {
            fut: fut_ref,
            value,
        });
    });
    Ok(py_fut)
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> &str {
    p.downcast_ref::<&str>()
        .copied()
        .or_else(|| p.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("unknown panic")
}
