//! Flat value classes that cross the boundary. Each mirrors one protocol message.

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use sandbox_proto as pb;

#[pyclass(module = "sandboxes._native", get_all, set_all)]
#[derive(Clone, Default)]
pub struct Limits {
    pub wall_time_s: f64,
    pub cpu_time_s: f64,
    pub memory_bytes: u64,
    pub max_pids: u32,
    pub max_output_bytes: u64,
    pub max_file_size_bytes: u64,
    pub max_open_files: u32,
    pub kill_on_output_limit: bool,
}

#[pymethods]
impl Limits {
    #[new]
    #[pyo3(signature = (wall_time_s=0.0, cpu_time_s=0.0, memory_bytes=0, max_pids=0, max_output_bytes=0, max_file_size_bytes=0, max_open_files=0, kill_on_output_limit=false))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        wall_time_s: f64,
        cpu_time_s: f64,
        memory_bytes: u64,
        max_pids: u32,
        max_output_bytes: u64,
        max_file_size_bytes: u64,
        max_open_files: u32,
        kill_on_output_limit: bool,
    ) -> Self {
        Limits {
            wall_time_s,
            cpu_time_s,
            memory_bytes,
            max_pids,
            max_output_bytes,
            max_file_size_bytes,
            max_open_files,
            kill_on_output_limit,
        }
    }
}

impl Limits {
    pub fn to_proto(&self) -> pb::Limits {
        pb::Limits {
            wall_time_s: self.wall_time_s,
            cpu_time_s: self.cpu_time_s,
            memory_bytes: self.memory_bytes,
            max_pids: self.max_pids,
            max_output_bytes: self.max_output_bytes,
            max_file_size_bytes: self.max_file_size_bytes,
            max_open_files: self.max_open_files,
            kill_on_output_limit: self.kill_on_output_limit,
        }
    }
}

#[pyclass(module = "sandboxes._native", frozen, get_all)]
pub struct ExecResult {
    pub exit_code: i32,
    pub signal: i32,
    pub stdout: Py<PyBytes>,
    pub stderr: Py<PyBytes>,
    pub timed_out: bool,
    pub oom_killed: bool,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    pub cpu_limited: bool,
    pub pids_limited: bool,
    pub file_size_limited: bool,
    pub wall_time_s: f64,
    pub cpu_time_s: f64,
    pub peak_memory_bytes: u64,
    pub path: &'static str,
}

impl ExecResult {
    pub fn from_proto(py: Python<'_>, r: pb::ExecResult) -> Self {
        ExecResult {
            exit_code: r.exit_code,
            signal: r.signal,
            stdout: PyBytes::new(py, &r.stdout).unbind(),
            stderr: PyBytes::new(py, &r.stderr).unbind(),
            timed_out: r.timed_out,
            oom_killed: r.oom_killed,
            stdout_truncated: r.stdout_truncated,
            stderr_truncated: r.stderr_truncated,
            cpu_limited: r.cpu_limited,
            pids_limited: r.pids_limited,
            file_size_limited: r.file_size_limited,
            wall_time_s: r.wall_time_s,
            cpu_time_s: r.cpu_time_s,
            peak_memory_bytes: r.peak_memory_bytes,
            path: if r.path == pb::ExecPath::Zygote as i32 {
                "zygote"
            } else {
                "spawn"
            },
        }
    }
}

#[pyclass(module = "sandboxes._native", frozen, get_all)]
pub struct ExecEvent {
    pub kind: &'static str,
    pub pid: Option<u32>,
    pub data: Option<Py<PyBytes>>,
    pub result: Option<Py<ExecResult>>,
}

impl ExecEvent {
    pub fn from_proto(py: Python<'_>, e: pb::ExecEvent) -> PyResult<Self> {
        use pb::exec_event::Kind;
        let empty = ExecEvent {
            kind: "keepalive",
            pid: None,
            data: None,
            result: None,
        };
        Ok(match e.kind {
            Some(Kind::Started(s)) => ExecEvent {
                kind: "started",
                pid: Some(s.pid),
                ..empty
            },
            Some(Kind::Stdout(b)) => ExecEvent {
                kind: "stdout",
                data: Some(PyBytes::new(py, &b).unbind()),
                ..empty
            },
            Some(Kind::Stderr(b)) => ExecEvent {
                kind: "stderr",
                data: Some(PyBytes::new(py, &b).unbind()),
                ..empty
            },
            Some(Kind::Exit(r)) => ExecEvent {
                kind: "exit",
                result: Some(Py::new(py, ExecResult::from_proto(py, r))?),
                ..empty
            },
            Some(Kind::Keepalive(_)) | None => empty,
        })
    }
}

#[pyclass(module = "sandboxes._native", frozen, get_all)]
pub struct DirEntry {
    pub name: String,
    pub is_dir: bool,
    pub is_symlink: bool,
    pub size: u64,
    pub mode: u32,
    pub path: String,
    pub mtime: f64,
    pub uid: u32,
    pub gid: u32,
    pub owner: String,
    pub group: String,
    pub symlink_target: String,
    pub target_is_dir: bool,
    pub r#type: String,
}

impl From<pb::DirEntry> for DirEntry {
    fn from(e: pb::DirEntry) -> Self {
        DirEntry {
            name: e.name,
            is_dir: e.is_dir,
            is_symlink: e.is_symlink,
            size: e.size,
            mode: e.mode,
            path: e.path,
            mtime: e.mtime,
            uid: e.uid,
            gid: e.gid,
            owner: e.owner,
            group: e.group,
            symlink_target: e.symlink_target,
            target_is_dir: e.target_is_dir,
            r#type: e.r#type,
        }
    }
}

#[pyclass(module = "sandboxes._native", frozen, get_all)]
pub struct AgentInfo {
    pub version: String,
    pub cgroup_version: String,
    pub seccomp: bool,
    pub namespaces: Vec<String>,
    pub languages: Vec<String>,
    pub zygote: bool,
    pub sandbox_uid: u32,
    pub sandbox_gid: u32,
    pub running_execs: u32,
    pub total_execs: u64,
    pub memory_bytes: u64,
    pub uptime_s: f64,
    pub work_dir: String,
    pub landlock: bool,
    pub egress_allowed: u64,
    pub egress_refused: u64,
}

impl From<pb::InfoResponse> for AgentInfo {
    fn from(i: pb::InfoResponse) -> Self {
        let caps = i.capabilities.unwrap_or_default();
        let usage = i.usage.unwrap_or_default();
        AgentInfo {
            version: i.version,
            cgroup_version: caps.cgroup_version,
            seccomp: caps.seccomp,
            namespaces: caps.namespaces,
            languages: caps.languages,
            zygote: caps.zygote,
            sandbox_uid: caps.sandbox_uid,
            sandbox_gid: caps.sandbox_gid,
            running_execs: usage.running_execs,
            total_execs: usage.total_execs,
            memory_bytes: usage.memory_bytes,
            uptime_s: usage.uptime_s,
            landlock: caps.landlock,
            work_dir: i.work_dir,
            egress_allowed: usage.egress_allowed,
            egress_refused: usage.egress_refused,
        }
    }
}

fn verdict_name(v: i32) -> &'static str {
    match pb::Verdict::try_from(v).unwrap_or(pb::Verdict::Unspecified) {
        pb::Verdict::Accepted => "accepted",
        pb::Verdict::WrongAnswer => "wrong_answer",
        pb::Verdict::TimeLimit => "time_limit",
        pb::Verdict::MemoryLimit => "memory_limit",
        pb::Verdict::RuntimeError => "runtime_error",
        pb::Verdict::CompileError => "compile_error",
        pb::Verdict::OutputLimit => "output_limit",
        pb::Verdict::Skipped => "skipped",
        pb::Verdict::SandboxError | pb::Verdict::Unspecified => "sandbox_error",
    }
}

#[pyclass(module = "sandboxes._native", frozen, get_all)]
pub struct CaseResult {
    pub verdict: &'static str,
    pub exit_code: i32,
    pub signal: i32,
    pub wall_time_s: f64,
    pub cpu_time_s: f64,
    pub peak_memory_bytes: u64,
    pub stdout: Py<PyBytes>,
    pub stderr: Py<PyBytes>,
    pub message: String,
    pub path: &'static str,
}

#[pyclass(module = "sandboxes._native", frozen, get_all)]
pub struct RunTestsReport {
    pub cases: Vec<Py<CaseResult>>,
    pub passed: u32,
    pub total: u32,
    pub compiled: bool,
    pub compile_output: Py<PyBytes>,
    pub compile_time_s: f64,
    pub wall_time_s: f64,
}

impl RunTestsReport {
    pub fn from_proto(py: Python<'_>, r: pb::RunTestsReport) -> PyResult<Self> {
        let cases = r
            .cases
            .into_iter()
            .map(|c| {
                Py::new(
                    py,
                    CaseResult {
                        verdict: verdict_name(c.verdict),
                        exit_code: c.exit_code,
                        signal: c.signal,
                        wall_time_s: c.wall_time_s,
                        cpu_time_s: c.cpu_time_s,
                        peak_memory_bytes: c.peak_memory_bytes,
                        stdout: PyBytes::new(py, &c.stdout).unbind(),
                        stderr: PyBytes::new(py, &c.stderr).unbind(),
                        message: c.message,
                        path: if c.path == pb::ExecPath::Zygote as i32 {
                            "zygote"
                        } else {
                            "spawn"
                        },
                    },
                )
            })
            .collect::<PyResult<Vec<_>>>()?;
        Ok(RunTestsReport {
            cases,
            passed: r.passed,
            total: r.total,
            compiled: r.compiled,
            compile_output: PyBytes::new(py, &r.compile_output).unbind(),
            compile_time_s: r.compile_time_s,
            wall_time_s: r.wall_time_s,
        })
    }
}
