//! An interactive execution: stdin and signals go one way, events the other. The call lives in a
//! task on the runtime; cancelling or dropping the handle aborts it, and the agent kills the
//! program when the call goes away.

use std::sync::Arc;

use pyo3::prelude::*;
use sandbox_proto as pb;
use tokio::sync::{mpsc, Mutex};
use tokio_stream::wrappers::ReceiverStream;

use crate::client::Client;
use crate::errors::{err, from_status, Kind};
use crate::runtime::{self, Later};
use crate::values::ExecEvent;

type EventRx = mpsc::Receiver<PyResult<pb::ExecEvent>>;

#[pyclass(module = "sandboxes._native", frozen)]
pub struct ExecStream {
    /// Taken on cancel: the request stream must end too, or the HTTP/2 stream stays half open
    /// and the agent never learns that the caller went away.
    input: std::sync::Mutex<Option<mpsc::Sender<pb::ExecInput>>>,
    events: Arc<Mutex<(EventRx, bool)>>,
    task: tokio::task::JoinHandle<()>,
}

impl ExecStream {
    pub fn open(mut client: Client, start: pb::ExecRequest) -> Self {
        let (input, input_rx) = mpsc::channel(64);
        let (events_tx, events_rx) = mpsc::channel(64);
        let first = pb::ExecInput {
            kind: Some(pb::exec_input::Kind::Start(start)),
        };
        // The channel is empty and has room: this cannot fail.
        let _ = input.try_send(first);
        let task = runtime::handle().spawn(async move {
            let mut events = match client.exec_stream(ReceiverStream::new(input_rx)).await {
                Ok(r) => r.into_inner(),
                Err(s) => {
                    let _ = events_tx.send(Err(from_status(s))).await;
                    return;
                }
            };
            loop {
                match events.message().await {
                    Ok(Some(e)) => {
                        if events_tx.send(Ok(e)).await.is_err() {
                            return;
                        }
                    }
                    Ok(None) => return,
                    Err(s) => {
                        let _ = events_tx.send(Err(from_status(s))).await;
                        return;
                    }
                }
            }
        });
        ExecStream {
            input: std::sync::Mutex::new(Some(input)),
            events: Arc::new(Mutex::new((events_rx, false))),
            task,
        }
    }

    fn send<'py>(
        &self,
        py: Python<'py>,
        kind: pb::exec_input::Kind,
    ) -> PyResult<Bound<'py, PyAny>> {
        let input = self.input.lock().unwrap_or_else(|e| e.into_inner()).clone();
        runtime::awaitable(py, async move {
            let ended = || err(Kind::InvalidRequest, "the execution has ended");
            input
                .ok_or_else(ended)?
                .send(pb::ExecInput { kind: Some(kind) })
                .await
                .map_err(|_| ended())
        })
    }
}

#[pymethods]
impl ExecStream {
    /// The next event, or None once the exit event was delivered.
    fn next<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let events = self.events.clone();
        runtime::awaitable(py, async move {
            let mut guard = events.lock().await;
            let (rx, done) = &mut *guard;
            if *done {
                return Ok(None);
            }
            match rx.recv().await {
                Some(Ok(e)) => {
                    if matches!(e.kind, Some(pb::exec_event::Kind::Exit(_))) {
                        *done = true;
                    }
                    Ok(Some(Later(move |py: Python<'_>| {
                        Py::new(py, ExecEvent::from_proto(py, e)?).map(Py::into_any)
                    })))
                }
                Some(Err(e)) => {
                    *done = true;
                    Err(e)
                }
                None => {
                    *done = true;
                    Err(err(
                        Kind::SandboxLost,
                        "the execution stream ended without an exit event",
                    ))
                }
            }
        })
    }

    fn send_stdin<'py>(&self, py: Python<'py>, data: Vec<u8>) -> PyResult<Bound<'py, PyAny>> {
        self.send(py, pb::exec_input::Kind::Stdin(data.into()))
    }

    fn close_stdin<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.send(py, pb::exec_input::Kind::CloseStdin(true))
    }

    fn signal<'py>(&self, py: Python<'py>, signo: i32) -> PyResult<Bound<'py, PyAny>> {
        self.send(py, pb::exec_input::Kind::Signal(signo))
    }

    /// Gives the program's terminal `rows` x `cols` (a stream started with a terminal).
    fn resize<'py>(&self, py: Python<'py>, rows: u32, cols: u32) -> PyResult<Bound<'py, PyAny>> {
        self.send(
            py,
            pb::exec_input::Kind::Resize(pb::TerminalSize { rows, cols }),
        )
    }

    fn cancel(&self) {
        self.input.lock().unwrap_or_else(|e| e.into_inner()).take();
        self.task.abort();
    }
}

impl Drop for ExecStream {
    fn drop(&mut self) {
        self.task.abort();
    }
}
