//! A batch of gradings: the call lives in a task on the runtime and each submission's report comes
//! back as it finishes. Cancelling or dropping the handle ends the call, and the agent kills the
//! programs it was running.

use std::sync::Arc;
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::IntoPyObjectExt;
use sandbox_proto as pb;
use tokio::sync::{mpsc, Mutex};

use crate::client::Client;
use crate::errors::{err, from_status, Kind};
use crate::runtime::{self, Later};
use crate::values::RunTestsReport;

type ResultRx = mpsc::Receiver<PyResult<pb::RunTestsBatchResult>>;

#[pyclass(module = "sandboxes._native", frozen)]
pub struct GradeStream {
    results: Arc<Mutex<(ResultRx, bool)>>,
    task: tokio::task::JoinHandle<()>,
}

impl GradeStream {
    pub fn open(
        mut client: Client,
        req: pb::RunTestsBatchRequest,
        deadline: Option<Duration>,
    ) -> Self {
        let (tx, rx) = mpsc::channel(64);
        let task = runtime::handle().spawn(async move {
            let forward = async {
                let mut results = client
                    .run_tests_batch(req)
                    .await
                    .map_err(from_status)?
                    .into_inner();
                while let Some(r) = results.message().await.map_err(from_status)? {
                    if tx.send(Ok(r)).await.is_err() {
                        break;
                    }
                }
                Ok(())
            };
            let outcome = match deadline {
                Some(d) => tokio::time::timeout(d, forward).await.unwrap_or_else(|_| {
                    Err(err(
                        Kind::Timeout,
                        format!("the batch did not finish within {d:?}"),
                    ))
                }),
                None => forward.await,
            };
            if let Err(e) = outcome {
                let _ = tx.send(Err(e)).await;
            }
        });
        GradeStream {
            results: Arc::new(Mutex::new((rx, false))),
            task,
        }
    }
}

#[pymethods]
impl GradeStream {
    /// The next (index, report), or None once every submission was answered.
    fn next<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let results = self.results.clone();
        runtime::awaitable(py, async move {
            let mut guard = results.lock().await;
            let (rx, done) = &mut *guard;
            if *done {
                return Ok(None);
            }
            match rx.recv().await {
                Some(Ok(r)) => {
                    let report = r.report.unwrap_or_default();
                    Ok(Some(Later(move |py: Python<'_>| {
                        let report = Py::new(py, RunTestsReport::from_proto(py, report)?)?;
                        (r.index, report).into_py_any(py)
                    })))
                }
                Some(Err(e)) => {
                    *done = true;
                    Err(e)
                }
                None => {
                    *done = true;
                    Ok(None)
                }
            }
        })
    }

    fn cancel(&self) {
        self.task.abort();
    }
}

impl Drop for GradeStream {
    fn drop(&mut self) {
        self.task.abort();
    }
}
