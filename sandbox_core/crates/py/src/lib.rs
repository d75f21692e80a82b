//! `sandboxes._native`: the native data path of the Python package.
//!
//! Only flat values, bytes and opaque handles cross this boundary: an agent client (tonic over a
//! unix socket or TCP), the local launcher (an agent in fresh namespaces) and the host's layer
//! conversions (`layers.rs`; an image's layer is read from the Python file that holds it). Every
//! failure is a `NativeError` with a `kind` (and, for a failed step, its `step`), translated into
//! `sandboxes.errors` on the Python side in one place.

mod batch;
mod cgroup;
mod client;
mod completion;
mod egress;
mod errors;
mod forward;
mod languages;
mod launch_child;
mod launcher;
mod layers;
mod programs_ns;
mod runtime;
mod stream;
mod values;

use pyo3::prelude::*;

/// The command line of a Python template process (`sandbox_exec::template::command`) whose
/// zygotes serve the agent's programs: `python` as the sandbox sees it at /usr/bin/python3, its
/// listening socket at fd `listen_fd`, its retirement pipe's read end at fd `retire_fd`.
#[pyfunction]
fn python_template_command(python: &str, listen_fd: i32, retire_fd: i32) -> Vec<String> {
    sandbox_exec::template::command(
        python,
        sandbox_judge::languages::PYTHON_ZYGOTE_PRELUDE,
        listen_fd,
        retire_fd,
    )
}

#[pyfunction]
fn agent_version() -> &'static str {
    sandbox_proto::AGENT_VERSION
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    runtime::init();
    m.add("NativeError", m.py().get_type::<errors::NativeError>())?;
    errors::add_attributes(m.py())?;
    m.add_class::<values::Limits>()?;
    m.add_class::<values::ExecResult>()?;
    m.add_class::<values::ExecEvent>()?;
    m.add_class::<values::DirEntry>()?;
    m.add_class::<values::AgentInfo>()?;
    m.add_class::<values::CaseResult>()?;
    m.add_class::<values::RunTestsReport>()?;
    m.add_class::<client::AgentClient>()?;
    m.add_class::<stream::ExecStream>()?;
    m.add_class::<batch::GradeStream>()?;
    m.add_class::<launcher::LaunchConfig>()?;
    m.add_class::<launcher::LocalSandbox>()?;
    m.add_function(wrap_pyfunction!(launcher::launch_local, m)?)?;
    m.add_function(wrap_pyfunction!(agent_version, m)?)?;
    m.add_function(wrap_pyfunction!(python_template_command, m)?)?;
    m.add_function(wrap_pyfunction!(languages::languages, m)?)?;
    m.add_function(wrap_pyfunction!(egress::egress_rules, m)?)?;
    m.add_function(wrap_pyfunction!(egress::non_public_networks, m)?)?;
    m.add_function(wrap_pyfunction!(cgroup::own_cgroup_dirs, m)?)?;
    m.add_function(wrap_pyfunction!(errors::error_kinds, m)?)?;
    m.add_function(wrap_pyfunction!(errors::steps, m)?)?;
    m.add_function(wrap_pyfunction!(errors::kind_of_status_code, m)?)?;
    m.add_function(wrap_pyfunction!(layers::pack_layer, m)?)?;
    m.add_function(wrap_pyfunction!(layers::squash_layers, m)?)?;
    m.add_function(wrap_pyfunction!(layers::apply_layer, m)?)?;
    Ok(())
}
