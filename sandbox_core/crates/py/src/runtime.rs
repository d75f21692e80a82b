//! The tokio runtime behind every awaitable of the module. Refuses to run in a forked child:
//! its threads did not survive the fork.

use std::sync::OnceLock;

use pyo3::PyResult;

static OWNER_PID: OnceLock<u32> = OnceLock::new();

pub fn init() {
    OWNER_PID.get_or_init(std::process::id);
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder
        .worker_threads(2)
        .enable_all()
        .thread_name("sandboxes-native");
    pyo3_async_runtimes::tokio::init(builder);
}

pub fn check_pid() -> PyResult<()> {
    match OWNER_PID.get() {
        Some(&pid) if pid != std::process::id() => Err(crate::errors::err(
            "failed_precondition",
            "sandboxes._native cannot be used in a forked child process; create clients after fork",
        )),
        _ => Ok(()),
    }
}

pub fn handle() -> &'static tokio::runtime::Runtime {
    pyo3_async_runtimes::tokio::get_runtime()
}
