//! The local backend's launcher: starts one agent as pid 1 of fresh pid, mount, network, ipc, uts
//! and cgroup namespaces (plus a user namespace when not root), inside its own cgroup, serving on
//! a unix socket bound here, outside the sandbox, and handed over as an fd.
//!
//! Order of a launch: bind the socket, create the cgroup, clone the child with new namespaces,
//! map its ids (on cgroup v2 also move it into the cgroup), release it; it joins the cgroup itself
//! on v1 (through `tasks`: see `SandboxCgroup::open_self_join_files`), unshares its cgroup
//! namespace and execs the agent, which builds its root file system, then writes one byte to the
//! readiness pipe, or the failure record of the start-up step that failed
//! (`sandbox_exec::readiness`). Every failure is a `launch` error naming its `Step`.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::prelude::*;
use tokio::io::AsyncReadExt;

use sandbox_exec::cgroup::Version;
use sandbox_exec::fds;
use sandbox_exec::readiness::{self, Report};
use sandbox_exec::Step;

use crate::cgroup::{CgroupLimits, SandboxCgroup};
use crate::errors::{err, launch_err, Kind};
use crate::launch_child::{self, ChildMemory};
use crate::programs_ns;
use crate::runtime;

const READY_TIMEOUT: Duration = Duration::from_secs(30);

#[pyclass(module = "sandboxes._native", get_all, set_all)]
#[derive(Clone)]
pub struct LaunchConfig {
    agent_path: String,
    run_dir: String,
    uid: u32,
    gid: u32,
    lease_ttl_s: f64,
    memory_bytes: u64,
    max_pids: u32,
    cpu_quota: f64,
    work_dir: String,
    work_size_bytes: u64,
    tmp_size_bytes: u64,
    network: bool,
    seccomp: bool,
    cgroups: bool,
    ro_binds: Vec<String>,
    env: Vec<(String, String)>,
    /// When the agent starts its Python zygote: "lazy", "eager" or "off".
    python_zygote: String,
    /// Who runs programs: "sandbox" (uid/gid) or "root" (uid 0, with a writable root of
    /// `root_size_bytes`), inside a user namespace whose ids are the host's
    /// `id_base..id_base+65536` when `id_base` is set (required for "root").
    user: String,
    id_base: u32,
    root_size_bytes: u64,
    /// An unpacked image to build the sandbox's root on ("": the host's /usr view).
    image_root: String,
    /// Checkpoint layers (unpacked directories) the sandbox is made from, bottom first.
    layers: Vec<String>,
    /// Volumes bound in the sandbox, the agent's `--volume SRC:DST[:ro]`.
    volumes: Vec<String>,
    /// Layered volumes, the agent's `--layered-volume rw|ro:DST[:LAYER...]`.
    layered_volumes: Vec<String>,
    /// An egress allow-list (the agent's `--egress=allow --egress-rule`, possibly empty): the
    /// sandbox gets a network namespace of its own whose one way out is the agent's proxy,
    /// which opens connections in this process's network namespace, and whose policy can be
    /// replaced while it runs. None: `network` decides (none, or the host's).
    egress_allow: Option<Vec<String>>,
    /// The listening socket of a template process (`sandbox_exec::template`) the agent makes its
    /// Python zygote from ("": it starts its own). Reached here, outside the sandbox: the agent
    /// gets a connection to it.
    python_template: String,
    /// The sandbox's pid namespace belongs to its programs' user namespace, with an init of its
    /// own (`programs_ns`): what a memory snapshot's programs with threads or children are
    /// restored into. Needs an id range (`id_base`) and a launcher that is root; no template.
    programs_pid_ns: bool,
}

#[pymethods]
impl LaunchConfig {
    #[new]
    #[pyo3(signature = (agent_path, run_dir, *, uid=65534, gid=65534, lease_ttl_s=30.0, memory_bytes=0, max_pids=0, cpu_quota=0.0, work_dir="/work".to_string(), work_size_bytes=0, tmp_size_bytes=0, network=false, seccomp=true, cgroups=true, ro_binds=None, env=None, python_zygote="lazy".to_string(), user="sandbox".to_string(), id_base=0, root_size_bytes=0, image_root="".to_string(), egress_allow=None, layers=None, volumes=None, layered_volumes=None, python_template="".to_string(), programs_pid_ns=false))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        agent_path: String,
        run_dir: String,
        uid: u32,
        gid: u32,
        lease_ttl_s: f64,
        memory_bytes: u64,
        max_pids: u32,
        cpu_quota: f64,
        work_dir: String,
        work_size_bytes: u64,
        tmp_size_bytes: u64,
        network: bool,
        seccomp: bool,
        cgroups: bool,
        ro_binds: Option<Vec<String>>,
        env: Option<std::collections::BTreeMap<String, String>>,
        python_zygote: String,
        user: String,
        id_base: u32,
        root_size_bytes: u64,
        image_root: String,
        egress_allow: Option<Vec<String>>,
        layers: Option<Vec<String>>,
        volumes: Option<Vec<String>>,
        layered_volumes: Option<Vec<String>>,
        python_template: String,
        programs_pid_ns: bool,
    ) -> PyResult<Self> {
        let layers = layers.unwrap_or_default();
        let volumes = volumes.unwrap_or_default();
        let layered_volumes = layered_volumes.unwrap_or_default();
        if let Some(v) = layered_volumes
            .iter()
            .find(|v| !(v.starts_with("rw:/") || v.starts_with("ro:/")))
        {
            return Err(err(
                Kind::InvalidRequest,
                format!(
                    "layered volumes must be rw|ro:DST[:LAYER...] with absolute paths, got {v}"
                ),
            ));
        }
        if let Some(v) = volumes
            .iter()
            .find(|v| !v.starts_with('/') || !v.contains(":/"))
        {
            return Err(err(
                Kind::InvalidRequest,
                format!("volumes must be SRC:DST[:ro] with absolute paths, got {v}"),
            ));
        }
        if let Some(l) = layers.iter().find(|l| !l.starts_with('/')) {
            return Err(err(
                Kind::InvalidRequest,
                format!("layers must be absolute paths, got {l}"),
            ));
        }
        if network && egress_allow.is_some() {
            return Err(err(
                Kind::InvalidRequest,
                "network (the host's) and an egress allow-list exclude each other",
            ));
        }
        if !image_root.is_empty() && !image_root.starts_with('/') {
            return Err(err(
                Kind::InvalidRequest,
                format!("image_root must be an absolute path, got {image_root}"),
            ));
        }
        match (user.as_str(), id_base) {
            ("sandbox", b) if b.checked_add(1 << 16).is_some() => {}
            ("root", b) if b > 0 && b.checked_add(1 << 16).is_some() => {}
            ("sandbox" | "root", _) => {
                return Err(err(
                    Kind::InvalidRequest,
                    "id_base must be in [1, 2**32 - 65536] (0: none, for user sandbox only)",
                ))
            }
            _ => {
                return Err(err(
                    Kind::InvalidRequest,
                    format!("user must be sandbox or root, got {user}"),
                ))
            }
        }
        if !["lazy", "eager", "off"].contains(&python_zygote.as_str()) {
            return Err(err(
                Kind::InvalidRequest,
                format!("python_zygote must be lazy, eager or off, got {python_zygote}"),
            ));
        }
        if !lease_ttl_s.is_finite() || lease_ttl_s < 0.0 {
            return Err(err(
                Kind::InvalidRequest,
                format!("lease_ttl_s must be >= 0, got {lease_ttl_s}"),
            ));
        }
        if !cpu_quota.is_finite() || cpu_quota < 0.0 {
            return Err(err(
                Kind::InvalidRequest,
                format!("cpu_quota must be >= 0, got {cpu_quota}"),
            ));
        }
        if !work_dir.starts_with('/') || work_dir == "/" || work_dir.contains("..") {
            return Err(err(
                Kind::InvalidRequest,
                format!("work_dir must be an absolute path below /, got {work_dir}"),
            ));
        }
        Ok(LaunchConfig {
            agent_path,
            run_dir,
            uid,
            gid,
            lease_ttl_s,
            memory_bytes,
            max_pids,
            cpu_quota,
            work_dir,
            work_size_bytes,
            tmp_size_bytes,
            network,
            seccomp,
            cgroups,
            ro_binds: ro_binds.unwrap_or_default(),
            env: env.unwrap_or_default().into_iter().collect(),
            python_zygote,
            user,
            id_base,
            root_size_bytes,
            image_root,
            layers,
            volumes,
            layered_volumes,
            egress_allow,
            python_template,
            programs_pid_ns,
        })
    }
}

struct State {
    reaped: Option<i32>,
    cleaned: bool,
}

struct Inner {
    pid: i32,
    run_dir: PathBuf,
    cgroup: Option<SandboxCgroup>,
    state: Mutex<State>,
    /// What the child runs in until it execs the agent (it shares our memory until then); kept
    /// until the agent said it is ready, or the child is reaped.
    child_memory: Mutex<Option<Box<ChildMemory>>>,
    /// The init of the agent's pid namespace, when not the agent (`programs_ns`); taken once
    /// killed and reaped.
    init: Mutex<Option<i32>>,
    /// Dropped on a blocking-pool thread already (see `Drop`): kill right here.
    offloaded: bool,
}

impl Drop for Inner {
    /// The last handle gone (Python forgot it, or a launch was cancelled midway) must not leave
    /// a sandbox behind; the child is reaped before its memory goes.
    fn drop(&mut self) {
        let state = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        if state.cleaned {
            return;
        }
        // Dropped inside the client's runtime (a launch cancelled while it awaited readiness
        // drops there): the kill blocks until the agent's pid namespace is gone, so it goes to the
        // blocking pool and the runtime's one worker keeps serving other calls.
        if let (false, Ok(rt)) = (self.offloaded, tokio::runtime::Handle::try_current()) {
            let moved = Inner {
                pid: self.pid,
                run_dir: std::mem::take(&mut self.run_dir),
                cgroup: self.cgroup.take(),
                state: Mutex::new(State {
                    reaped: state.reaped,
                    cleaned: false,
                }),
                child_memory: Mutex::new(
                    self.child_memory
                        .get_mut()
                        .unwrap_or_else(|e| e.into_inner())
                        .take(),
                ),
                init: Mutex::new(
                    self.init
                        .get_mut()
                        .unwrap_or_else(|e| e.into_inner())
                        .take(),
                ),
                offloaded: true,
            };
            state.cleaned = true;
            // If the runtime is shutting down the closure is dropped here, killing inline.
            drop(rt.spawn_blocking(move || drop(moved)));
            return;
        }
        self.kill();
    }
}

impl Inner {
    /// Reap the agent if it has exited (or block until it does when `block`).
    fn reap(&self, block: bool) -> Option<i32> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if st.reaped.is_none() {
            let mut status = 0;
            // SAFETY: waitpid on our own child.
            let rc = unsafe {
                libc::waitpid(
                    self.pid,
                    &mut status,
                    if block { 0 } else { libc::WNOHANG } | libc::__WALL,
                )
            };
            if rc == self.pid
                || (rc < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ECHILD))
            {
                st.reaped = Some(status);
            }
        }
        st.reaped
    }

    fn kill(&self) {
        if self.state.lock().unwrap_or_else(|e| e.into_inner()).cleaned {
            return;
        }
        let init = self.init.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(init) = init {
            // SAFETY: signalling our own unreaped child (reaped below), so the pid cannot have
            // been reused. The kernel kills every process of its pid namespace with it.
            unsafe { libc::kill(init, libc::SIGKILL) };
        }
        if self.reap(false).is_none() {
            // SAFETY: signalling our own unreaped child, so the pid cannot have been reused.
            unsafe { libc::kill(self.pid, libc::SIGKILL) };
            // A paused sandbox's processes die only once thawed (cgroup v1's freezer).
            if let Some(cg) = &self.cgroup {
                let _ = cg.freeze(false);
            }
            // The kernel kills every process of the pid namespace with its init; this returns
            // once they are gone.
            self.reap(true);
        }
        if let Some(init) = init {
            programs_ns::kill_init(init);
        }
        if let Some(cg) = &self.cgroup {
            cg.remove();
        }
        let _ = std::fs::remove_dir_all(&self.run_dir);
        self.state.lock().unwrap_or_else(|e| e.into_inner()).cleaned = true;
    }
}

#[pyclass(module = "sandboxes._native", frozen)]
pub struct LocalSandbox {
    inner: Arc<Inner>,
    #[pyo3(get)]
    endpoint: String,
    #[pyo3(get)]
    token: String,
}

#[pymethods]
impl LocalSandbox {
    #[getter]
    fn pid(&self) -> i32 {
        self.inner.pid
    }
    #[getter]
    fn run_dir(&self) -> String {
        self.inner.run_dir.display().to_string()
    }
    #[getter]
    fn cgroup(&self) -> String {
        self.inner
            .cgroup
            .as_ref()
            .and_then(|c| c.dirs.first())
            .map(|d| d.display().to_string())
            .unwrap_or_default()
    }
    fn alive(&self) -> bool {
        self.inner.reap(false).is_none()
    }
    /// Pauses (`frozen`) or resumes every process of the sandbox through its cgroup's freezer;
    /// returns once the kernel reports the new state.
    fn freeze(&self, py: Python<'_>, frozen: bool) -> PyResult<()> {
        let inner = self.inner.clone();
        py.detach(move || match &inner.cgroup {
            Some(cg) => cg.freeze(frozen),
            None => Err("the sandbox was launched without cgroups".into()),
        })
        .map_err(|e| err(Kind::Internal, e))
    }
    fn kill(&self, py: Python<'_>) {
        let inner = self.inner.clone();
        py.detach(move || inner.kill());
    }
    fn wait<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let inner = self.inner.clone();
        runtime::awaitable(py, async move {
            if let Some(s) = inner.reap(false) {
                return Ok(s);
            }
            // A pidfd becomes readable when the process exits: pushed, not polled.
            // SAFETY: pidfd_open of our own unreaped child.
            let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, inner.pid, 0) } as RawFd;
            if fd >= 0 {
                // SAFETY: the kernel just gave us this fd.
                let fd = unsafe { OwnedFd::from_raw_fd(fd) };
                #[allow(deprecated)]
                if let Ok(afd) = tokio::io::unix::AsyncFd::new(fd) {
                    let _ = afd.readable().await;
                }
            }
            let inner2 = inner.clone();
            let s = tokio::task::spawn_blocking(move || inner2.reap(true))
                .await
                .map_err(|e| err(Kind::Internal, e.to_string()))?;
            Ok(s.unwrap_or(-1))
        })
    }
}

fn random_token() -> std::io::Result<String> {
    let mut buf = [0u8; 24];
    // SAFETY: getrandom into a buffer of the given length.
    if unsafe { libc::getrandom(buf.as_mut_ptr() as *mut libc::c_void, buf.len(), 0) }
        != buf.len() as isize
    {
        return Err(std::io::Error::last_os_error());
    }
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

fn cstring(s: impl AsRef<[u8]>) -> PyResult<CString> {
    CString::new(s.as_ref()).map_err(|_| err(Kind::InvalidRequest, "NUL byte in a launch argument"))
}

fn agent_argv(c: &LaunchConfig, namespaces: &[&str]) -> Vec<String> {
    let mut a = vec![
        c.agent_path.clone(),
        "--listen-fd=3".into(),
        "--ready-fd=4".into(),
        "--token-fd=5".into(),
        format!("--lease-ttl={}", c.lease_ttl_s),
        format!("--work-dir={}", c.work_dir),
        format!("--uid={}", c.uid),
        format!("--gid={}", c.gid),
        format!("--work-size={}", c.work_size_bytes),
        format!("--tmp-size={}", c.tmp_size_bytes),
        "--new-root".into(),
        "--hostname=sandbox".into(),
        format!("--namespaces={}", namespaces.join(",")),
        format!("--python-zygote={}", c.python_zygote),
    ];
    if c.network {
        // The host's network namespace: its loopback is the host's, never forwarded.
        a.push("--outside-dns".into());
        a.push("--no-ports".into());
    } else {
        a.push("--loopback".into());
    }
    if !c.seccomp {
        a.push("--no-seccomp".into());
    }
    if !c.cgroups {
        a.push("--no-cgroups".into());
    }
    for b in &c.ro_binds {
        a.push(format!("--ro-bind={b}"));
    }
    for (k, v) in &c.env {
        a.push(format!("--env={k}={v}"));
    }
    if c.id_base > 0 {
        a.push(format!("--id-base={}", c.id_base));
    }
    if !c.image_root.is_empty() {
        a.push(format!("--image-root={}", c.image_root));
    }
    for l in &c.layers {
        a.push(format!("--layer={l}"));
    }
    for v in &c.volumes {
        a.push(format!("--volume={v}"));
    }
    for v in &c.layered_volumes {
        a.push(format!("--layered-volume={v}"));
    }
    if let Some(rules) = &c.egress_allow {
        // The agent opens this process's namespace while the launcher is still there to be seen.
        a.push(format!(
            "--egress-netns=/proc/{}/ns/net",
            std::process::id()
        ));
        a.push("--egress=allow".into());
        for r in rules {
            a.push(format!("--egress-rule={r}"));
        }
    }
    if c.user == "root" {
        a.push("--user=root".into());
        a.push(format!("--root-size={}", c.root_size_bytes));
    }
    a
}

/// A started agent not yet known to be ready: its handle, and the pipes that will tell.
struct Started {
    inner: Arc<Inner>,
    handle: LocalSandbox,
    ready_r: OwnedFd,
    err_r: OwnedFd,
}

async fn launch(config: LaunchConfig) -> PyResult<LocalSandbox> {
    // Starting makes blocking system calls for a millisecond or more (cgroups, a clone into new
    // namespaces, id maps): a blocking-pool thread makes them, so the runtime's worker goes on
    // serving other calls meanwhile. A launch cancelled during the start still finishes it, and
    // the unused handle kills what was started when it drops (`Drop for Inner`).
    let started = tokio::task::spawn_blocking(move || start(config))
        .await
        .map_err(|e| err(Kind::Internal, format!("launch start: {e}")))??;
    wait_ready(started).await
}

/// Everything up to the release of the agent's child, synchronously.
fn start(config: LaunchConfig) -> PyResult<Started> {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let run_dir = PathBuf::from(&config.run_dir);
    std::fs::create_dir_all(&run_dir)
        .map_err(|e| launch_err(Step::RunDir, format!("{}: {e}", run_dir.display())))?;
    std::fs::set_permissions(
        &run_dir,
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .map_err(|e| launch_err(Step::RunDir, format!("{}: {e}", run_dir.display())))?;
    let sock_path = run_dir.join("agent.sock");
    let _ = std::fs::remove_file(&sock_path);
    let listener = std::os::unix::net::UnixListener::bind(&sock_path)
        .map_err(|e| launch_err(Step::Bind, format!("{}: {e}", sock_path.display())))?;
    let token = random_token().map_err(|e| launch_err(Step::Token, e.to_string()))?;

    let cgroup = if config.cgroups {
        let name = run_dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "sandbox".into());
        let limits = CgroupLimits {
            memory_bytes: config.memory_bytes,
            max_pids: config.max_pids,
            cpu_quota: config.cpu_quota,
        };
        match SandboxCgroup::create(&name, &limits) {
            Ok(cg) => Some(cg),
            // Asked-for limits that cannot be enforced are an error, not a silent downgrade.
            Err(e) if config.memory_bytes > 0 || config.max_pids > 0 || config.cpu_quota > 0.0 => {
                let _ = std::fs::remove_dir_all(&run_dir);
                return Err(launch_err(Step::CreateCgroup, e));
            }
            Err(_) => None,
        }
    } else {
        None
    };
    let cleanup_early = |cg: &Option<SandboxCgroup>| {
        if let Some(cg) = cg {
            cg.remove();
        }
        let _ = std::fs::remove_dir_all(&run_dir);
    };

    let mut namespaces = vec!["pid", "mnt", "ipc", "uts"];
    let mut flags =
        libc::CLONE_NEWPID | libc::CLONE_NEWNS | libc::CLONE_NEWIPC | libc::CLONE_NEWUTS;
    if !config.network {
        flags |= libc::CLONE_NEWNET;
        namespaces.push("net");
    }
    if cgroup.is_some() {
        namespaces.push("cgroup");
    }
    if !root {
        flags |= libc::CLONE_NEWUSER;
        namespaces.push("user");
    }
    let mut config = config;
    if !root {
        // In a user namespace of one mapped id, programs keep the agent's (unprivileged) ids.
        config.uid = 0;
        config.gid = 0;
    }

    let pipes = (|| -> std::io::Result<_> {
        Ok((fds::pipe()?, fds::pipe()?, fds::pipe()?, fds::pipe()?))
    })()
    .map_err(|e| launch_err(Step::Pipe, e.to_string()))?;
    let ((sync_r, sync_w), (ready_r, ready_w), (token_r, token_w), (err_r, err_w)) = pipes;
    let devnull = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
        .map_err(|e| launch_err(Step::Devnull, e.to_string()))?;
    let join_files = match cgroup.as_ref().map(SandboxCgroup::open_self_join_files) {
        Some(Err(e)) => {
            cleanup_early(&cgroup);
            return Err(launch_err(Step::JoinCgroup, format!("open tasks: {e}")));
        }
        Some(Ok(files)) => files,
        None => vec![],
    };
    // A sandbox memory snapshots' programs are restored into: its programs' user namespace is
    // made here, and owns the pid namespace the agent is cloned into, whose init it also makes
    // (`programs_ns`).
    let programs_ns = if root && config.id_base > 0 && config.programs_pid_ns {
        let joins: Vec<_> = join_files.iter().map(AsRawFd::as_raw_fd).collect();
        let made = cstring(config.agent_path.as_bytes()).and_then(|agent| {
            programs_ns::make(config.id_base, &agent, &joins)
                .map_err(|e| launch_err(Step::UserNs, e.to_string()))
        });
        let ns = match made {
            Ok(ns) => ns,
            Err(e) => {
                cleanup_early(&cgroup);
                return Err(e);
            }
        };
        if let Some(cg) = cgroup.as_ref().filter(|cg| cg.version == Version::V2) {
            if let Err(e) = cg.join(ns.init) {
                programs_ns::kill_init(ns.init);
                cleanup_early(&cgroup);
                return Err(launch_err(Step::JoinCgroup, e.to_string()));
            }
        }
        Some(ns)
    } else {
        None
    };
    if programs_ns.is_some() {
        flags &= !libc::CLONE_NEWPID;
    }
    // A template that is gone (the manager starts another) only means the agent starts its own
    // zygote, as without one. None serves a `programs_ns` sandbox: a template's zygote becomes
    // the agent's child as an orphan of its pid namespace, which the namespace's init takes.
    let template = (!config.python_template.is_empty() && programs_ns.is_none())
        .then(|| sandbox_exec::template::connect(std::path::Path::new(&config.python_template)))
        .and_then(Result::ok);
    let mut argv_s = agent_argv(&config, &namespaces);
    if programs_ns.is_some() {
        argv_s.push(format!("--userns-fd={}", launch_child::USERNS_FD));
        argv_s.push(format!("--init-watch-fd={}", launch_child::INIT_WATCH_FD));
    }
    if template.is_some() {
        argv_s.push(format!(
            "--python-template-fd={}",
            launch_child::TEMPLATE_FD
        ));
    }
    let plan = launch_child::ChildPlan {
        path: cstring(config.agent_path.as_bytes())?,
        argv: argv_s.iter().map(cstring).collect::<PyResult<_>>()?,
        envp: vec![cstring("PATH=/usr/local/bin:/usr/bin:/bin")?],
        sync_r: sync_r.as_raw_fd(),
        listen: listener.as_raw_fd(),
        ready_w: ready_w.as_raw_fd(),
        token_r: token_r.as_raw_fd(),
        err_w: err_w.as_raw_fd(),
        devnull: devnull.as_raw_fd(),
        new_cgroupns: cgroup.is_some(),
        join: join_files.iter().map(AsRawFd::as_raw_fd).collect(),
        template: template.as_ref().map_or(-1, AsRawFd::as_raw_fd),
        userns: programs_ns.as_ref().map_or(-1, |ns| ns.user.as_raw_fd()),
        init_watch: programs_ns.as_ref().map_or(-1, |ns| ns.watch.as_raw_fd()),
    };
    let spawned = match &programs_ns {
        Some(ns) => programs_ns::in_pid_ns(&ns.pid, || launch_child::spawn(plan, flags)),
        None => launch_child::spawn(plan, flags),
    };
    let init = programs_ns.map(|ns| ns.init);
    drop(join_files);
    let (pid, child_memory) = match spawned {
        Ok(spawned) => spawned,
        Err(e) => {
            if let Some(init) = init {
                programs_ns::kill_init(init);
            }
            cleanup_early(&cgroup);
            return Err(launch_err(
                Step::Clone,
                format!("{e} (are user namespaces or CAP_SYS_ADMIN available?)"),
            ));
        }
    };
    drop((sync_r, ready_w, token_r, err_w, listener, devnull, template));
    let inner = Arc::new(Inner {
        pid,
        run_dir: run_dir.clone(),
        cgroup,
        state: Mutex::new(State {
            reaped: None,
            cleaned: false,
        }),
        child_memory: Mutex::new(Some(child_memory)),
        init: Mutex::new(init),
        offloaded: false,
    });
    let handle = LocalSandbox {
        inner: inner.clone(),
        endpoint: format!("unix://{}", sock_path.display()),
        token: token.clone(),
    };

    let release = (|| -> Result<(), (Step, String)> {
        match &inner.cgroup {
            Some(cg) if cg.version == Version::V2 => cg
                .join(pid)
                .map_err(|e| (Step::JoinCgroup, e.to_string()))?,
            _ => {} // v1: the child joins by itself (`open_self_join_files`)
        }
        if !root {
            // SAFETY: getuid/getgid have no preconditions.
            let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
            let w = |f: &str, v: String| {
                std::fs::write(format!("/proc/{pid}/{f}"), v)
                    .map_err(|e| (Step::UserNs, format!("{f}: {e}")))
            };
            w("setgroups", "deny".into())?;
            w("uid_map", format!("0 {uid} 1"))?;
            w("gid_map", format!("0 {gid} 1"))?;
        }
        let mut t = std::fs::File::from(token_w);
        std::io::Write::write_all(&mut t, token.as_bytes())
            .map_err(|e| (Step::Token, e.to_string()))?;
        drop(t);
        let mut s = std::fs::File::from(sync_w);
        std::io::Write::write_all(&mut s, b"G").map_err(|e| (Step::Sync, e.to_string()))?;
        Ok(())
    })();
    if let Err((step, detail)) = release {
        inner.kill();
        return Err(launch_err(step, detail));
    }

    Ok(Started {
        inner,
        handle,
        ready_r,
        err_r,
    })
}

/// Waits (without blocking) for the agent's readiness byte, or the report of why it died.
async fn wait_ready(started: Started) -> PyResult<LocalSandbox> {
    let Started {
        inner,
        handle,
        ready_r,
        err_r,
    } = started;
    // Readiness is pushed: the agent writes one byte once it serves, or the failure record of its
    // start-up step; the pipe closes without either if it dies unreported.
    let mut ready = tokio::net::unix::pipe::Receiver::from_owned_fd(ready_r)
        .map_err(|e| launch_err(Step::ReadyPipe, e.to_string()))?;
    // A failure record arrives whole, in one read (`readiness`).
    let mut record = vec![0u8; readiness::MAX_RECORD];
    let got = tokio::time::timeout(READY_TIMEOUT, ready.read(&mut record)).await;
    let report = match got {
        Ok(Ok(n)) => Ok(readiness::parse(&record[..n])),
        Ok(Err(_)) => Ok(Report::Unreported),
        Err(elapsed) => Err(elapsed),
    };
    match report {
        Ok(Report::Ready) => {
            // The agent runs: the child has exec'd and left our memory.
            inner
                .child_memory
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take();
            Ok(handle)
        }
        Ok(Report::Failed {
            step,
            name,
            message,
        }) => {
            // The agent's own start-up step failed and said which.
            inner.kill();
            Err(launch_err(
                step.unwrap_or(Step::AgentStart),
                if step.is_some() {
                    message
                } else {
                    format!("{message} (step {name})")
                },
            ))
        }
        Ok(Report::Unreported) => {
            let mut msg = [0u8; 3];
            // SAFETY: reading from our own pipe; the child is gone or has exec'd, so the write end is closed.
            let n =
                unsafe { libc::read(err_r.as_raw_fd(), msg.as_mut_ptr() as *mut libc::c_void, 3) };
            inner.kill();
            let status = inner
                .state
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .reaped
                .unwrap_or(-1);
            if n == 3 {
                let errno = msg[1] as i32 | ((msg[2] as i32) << 8);
                let step = Step::from_code(msg[0]).unwrap_or(Step::ExecAgent);
                Err(launch_err(
                    step,
                    format!("{}", std::io::Error::from_raw_os_error(errno)),
                ))
            } else {
                Err(launch_err(
                    Step::AgentStart,
                    format!("the agent exited or was killed before it was ready, without a report (wait status {status})"),
                ))
            }
        }
        Err(_) => {
            inner.kill();
            Err(launch_err(
                Step::ReadyTimeout,
                format!("the agent did not become ready within {READY_TIMEOUT:?}"),
            ))
        }
    }
}

#[pyfunction]
pub fn launch_local<'py>(
    py: Python<'py>,
    config: PyRef<'py, LaunchConfig>,
) -> PyResult<Bound<'py, PyAny>> {
    runtime::check_pid()?;
    runtime::awaitable(py, launch(config.clone()))
}
