//! How a finished call reaches its asyncio future: without the runtime thread touching Python.
//!
//! Each event loop gets one completion queue: a list that runtime threads append finished calls
//! to, and an eventfd the loop watches (`add_reader`). A runtime thread pushes the call's future
//! and its Rust output, and writes the eventfd only when the list was empty; the loop thread,
//! woken, empties the list and converts and sets each result, holding the GIL it already has.
//!
//! What this replaces, per call: the runtime thread taking the GIL, converting the output and
//! calling `call_soon_threadsafe` (Python code: a handle, a lock, a write to the loop's self-pipe),
//! while the loop thread waited for the GIL; then the loop draining its self-pipe until `recv`
//! raised (an exception built per wake-up). Calls finishing together share one wake-up.
//!
//! A loop that cannot be weakly referenced (so its queue could not be forgotten with it), or that
//! cannot watch a file descriptor (`add_reader` fails), gets the old path, `call_soon_threadsafe`.

use std::cell::Cell;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyWeakrefReference;

/// Builds a call's Python result on the loop thread.
pub type Convert = Box<dyn for<'py> FnOnce(Python<'py>) -> PyResult<Py<PyAny>> + Send>;

/// A call whose Rust side has ended: its asyncio future and what to set on it.
pub struct Finished {
    pub fut: Py<PyAny>,
    pub value: Result<Convert, PyErr>,
}

impl Finished {
    /// Sets the future's result or exception, unless it is done already (cancelled).
    fn settle(self, py: Python<'_>) -> PyResult<()> {
        let fut = self.fut.bind(py);
        if fut.call_method0(pyo3::intern!(py, "done"))?.is_truthy()? {
            return Ok(());
        }
        match self.value.and_then(|convert| convert(py)) {
            Ok(v) => fut.call_method1(pyo3::intern!(py, "set_result"), (v,))?,
            Err(e) => fut.call_method1(pyo3::intern!(py, "set_exception"), (e.into_value(py),))?,
        };
        Ok(())
    }
}

/// Where runtime threads hand finished calls to one event loop.
pub enum Deliver {
    Queue(Arc<Queue>),
    /// Fallback: the loop, to `call_soon_threadsafe` on.
    Threadsafe(Py<PyAny>),
}

impl Deliver {
    /// The delivery of `event_loop`, set up on its first call (on the loop's thread).
    pub fn for_loop(py: Python<'_>, event_loop: &Bound<'_, PyAny>) -> PyResult<Deliver> {
        match Queue::of_loop(py, event_loop)? {
            Some(q) => Ok(Deliver::Queue(q)),
            None => Ok(Deliver::Threadsafe(event_loop.clone().unbind())),
        }
    }

    /// Called on a runtime thread.
    pub fn deliver(self, done: Finished) {
        match self {
            Deliver::Queue(q) => q.push(done),
            Deliver::Threadsafe(event_loop) => {
                keep_thread_state();
                Python::attach(|py| {
                    let settle = Settle(Mutex::new(Some(done)));
                    // Fails only when the loop is closed: then nobody waits for the result.
                    let _ = event_loop
                        .bind(py)
                        .call_method1(pyo3::intern!(py, "call_soon_threadsafe"), (settle,));
                });
            }
        }
    }
}

/// The loop seen last (weakly) and its queue.
type LastLoop = (Py<PyWeakrefReference>, Arc<Queue>);

/// One loop's finished calls, and the eventfd that wakes it.
pub struct Queue {
    eventfd: OwnedFd,
    items: Mutex<Vec<Finished>>,
}

impl Queue {
    /// The queue of `event_loop`, registered with it on first use; `None` for a loop that does
    /// not support weak references.
    fn of_loop(py: Python<'_>, event_loop: &Bound<'_, PyAny>) -> PyResult<Option<Arc<Queue>>> {
        // The last loop seen: nearly every call comes from the same loop as the one before.
        static LAST: PyOnceLock<Mutex<Option<LastLoop>>> = PyOnceLock::new();
        // Every loop's queue (the reader callback holding it), forgotten with the loop.
        static BY_LOOP: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        let last = LAST.get_or_init(py, || Mutex::new(None));
        if let Some((weak, q)) = last.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            if weak.bind(py).upgrade().is_some_and(|l| l.is(event_loop)) {
                return Ok(Some(q.clone()));
            }
        }
        let Ok(weak) = PyWeakrefReference::new(event_loop) else {
            return Ok(None);
        };
        let by_loop = BY_LOOP
            .get_or_try_init(py, || {
                py.import("weakref")?
                    .getattr("WeakKeyDictionary")?
                    .call0()
                    .map(Bound::unbind)
            })?
            .bind(py);
        let drain = match by_loop.call_method1("get", (event_loop,))? {
            d if d.is_none() => {
                let drain = Bound::new(py, Drain(Arc::new(Queue::new()?)))?;
                let fd = drain.get().0.eventfd.as_raw_fd();
                if event_loop
                    .call_method1("add_reader", (fd, drain.clone()))
                    .is_err()
                {
                    // A loop without readers (e.g. a proactor): remember it, use the fallback.
                    by_loop.set_item(event_loop, false)?;
                    return Ok(None);
                }
                by_loop.set_item(event_loop, &drain)?;
                drain
            }
            d => match d.cast_into::<Drain>() {
                Ok(drain) => drain,
                Err(_) => return Ok(None),
            },
        };
        let q = drain.get().0.clone();
        *last.lock().unwrap_or_else(|e| e.into_inner()) = Some((weak.unbind(), q.clone()));
        Ok(Some(q))
    }

    fn new() -> PyResult<Queue> {
        // SAFETY: plain syscall; the fd is owned right away.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        Ok(Queue {
            // SAFETY: a fresh fd nobody else owns.
            eventfd: unsafe { OwnedFd::from_raw_fd(fd) },
            items: Mutex::new(Vec::new()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Finished>> {
        self.items.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn push(&self, done: Finished) {
        let was_empty = {
            let mut items = self.lock();
            items.push(done);
            items.len() == 1
        };
        // A non-empty list has a wake-up pending already: the loop reads the eventfd before it
        // takes the list, so whatever was pushed after that take wrote the eventfd again.
        if was_empty {
            let one = 1u64.to_ne_bytes();
            // SAFETY: writes 8 bytes from a live buffer; an eventfd write fails only on overflow.
            unsafe { libc::write(self.eventfd.as_raw_fd(), one.as_ptr().cast(), one.len()) };
        }
    }
}

/// The loop's reader callback: settles every finished call.
#[pyclass(module = "sandboxes._native", frozen)]
struct Drain(Arc<Queue>);

#[pymethods]
impl Drain {
    fn __call__(&self, py: Python<'_>) {
        let mut count = [0u8; 8];
        // SAFETY: reads 8 bytes into a live buffer; EAGAIN (nothing pending) is fine.
        unsafe {
            libc::read(
                self.0.eventfd.as_raw_fd(),
                count.as_mut_ptr().cast(),
                count.len(),
            )
        };
        let items = std::mem::take(&mut *self.0.lock());
        for done in items {
            // One caller's future failing to take its result must not strand the others.
            if let Err(e) = done.settle(py) {
                e.write_unraisable(py, None);
            }
        }
    }
}

/// `call_soon_threadsafe`'s callback in the fallback.
#[pyclass(module = "sandboxes._native", frozen)]
struct Settle(Mutex<Option<Finished>>);

#[pymethods]
impl Settle {
    fn __call__(&self, py: Python<'_>) -> PyResult<()> {
        match self.0.lock().ok().and_then(|mut d| d.take()) {
            Some(done) => done.settle(py),
            None => Ok(()),
        }
    }
}

thread_local! {
    static HAS_THREAD_STATE: Cell<bool> = const { Cell::new(false) };
}

/// Gives this runtime thread a Python thread state of its own for good (fallback path only).
/// Without one, each attach from a thread that Python did not start creates a thread state and
/// deletes it again on detach, mapping and unmapping its frame stack each time. Runtime threads
/// live as long as the process.
fn keep_thread_state() {
    HAS_THREAD_STATE.with(|has| {
        if has.get() {
            return;
        }
        // SAFETY: called on a runtime thread, which never holds the GIL between calls; the
        // state made by `PyGILState_Ensure` stays registered for this thread, and
        // `PyEval_SaveThread` releases the GIL it took (every later attach finds the state).
        unsafe {
            if pyo3::ffi::Py_IsInitialized() == 0 {
                return;
            }
            let _ = pyo3::ffi::PyGILState_Ensure();
            pyo3::ffi::PyEval_SaveThread();
        }
        has.set(true);
    });
}
