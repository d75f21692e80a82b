//! The per-sandbox cgroup the launcher puts each agent in, created under this process's own
//! cgroup (v1: one directory per controller; v2: one directory). The agent then sees it as the
//! root of its cgroup namespace and makes per-exec children inside.

use std::path::{Path, PathBuf};

use sandbox_exec::cgroup::Version;

/// This process's own cgroup as the exec crate discovers it: (controllers, or "" for v2,
/// directory) of each hierarchy a sandbox's cgroup is made in, and the v1 freezer hierarchy's
/// directory (where paused sandboxes are frozen).
#[derive(Clone)]
struct Own {
    dirs: Vec<(String, PathBuf)>,
    freezer: Option<PathBuf>,
}

/// The last discovery and the membership (/proc/self/cgroup) it was made for. Discovery parses
/// /proc/self/mountinfo and stats each hierarchy, which costs about as much CPU as making a
/// sandbox's cgroups; the membership is a few short lines, read at every create, so a process
/// moved to another cgroup discovers again. A create that fails forgets it (`forget_own`): a
/// hierarchy mounted or unmounted since is found then.
static OWN: std::sync::Mutex<Option<(String, Own)>> = std::sync::Mutex::new(None);

fn own() -> Own {
    let membership = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let mut cached = OWN.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((m, own)) = cached.as_ref() {
        if *m == membership {
            return own.clone();
        }
    }
    let dirs = sandbox_exec::cgroup::own_dirs().unwrap_or_default();
    let freezer = if dirs.iter().all(|(k, _)| !k.is_empty()) {
        sandbox_exec::cgroup::own_v1_dir("freezer")
    } else {
        None
    };
    let own = Own { dirs, freezer };
    if !membership.is_empty() {
        *cached = Some((membership, own.clone()));
    }
    own
}

fn forget_own() {
    *OWN.lock().unwrap_or_else(|e| e.into_inner()) = None;
}

/// `_native.own_cgroup_dirs()`: the same, the freezer's as ("freezer", dir), for the local
/// backend's reaping (Python).
#[pyo3::pyfunction]
pub fn own_cgroup_dirs() -> Vec<(String, String)> {
    let Own { mut dirs, freezer } = own();
    dirs.extend(freezer.map(|d| ("freezer".into(), d)));
    dirs.into_iter()
        .map(|(k, d)| (k, d.display().to_string()))
        .collect()
}

pub struct SandboxCgroup {
    pub dirs: Vec<PathBuf>,
    /// V1: a directory per hierarchy; V2: the one directory.
    pub version: Version,
    /// V1: the sandbox's directory in the freezer hierarchy (pause and resume), when the host
    /// mounts one; V2 freezes through `cgroup.freeze` of its one directory.
    pub freezer: Option<PathBuf>,
}

/// How long a freeze or a thaw may take before it is reported as failed (a freeze waits for
/// every task to stop, e.g. one in an uninterruptible sleep).
const FREEZE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

pub struct CgroupLimits {
    pub memory_bytes: u64,
    pub max_pids: u32,
    pub cpu_quota: f64,
}

fn write(dir: &Path, file: &str, value: &str) -> std::io::Result<()> {
    std::fs::write(dir.join(file), value)
}

impl SandboxCgroup {
    /// Creates `<own>/sandboxes/<name>` in every usable hierarchy and sets the sandbox's limits.
    pub fn create(name: &str, limits: &CgroupLimits) -> Result<Self, String> {
        let made = Self::create_in(own(), name, limits);
        if made.is_err() {
            forget_own();
        }
        made
    }

    fn create_in(own: Own, name: &str, limits: &CgroupLimits) -> Result<Self, String> {
        let Own { dirs: own, freezer } = own;
        let mut dirs = Vec::new();
        if own.is_empty() {
            return Err("no cgroup hierarchy found".into());
        }
        let version = if own.iter().any(|(key, _)| key.is_empty()) {
            Version::V2
        } else {
            Version::V1
        };
        for (key, base) in own {
            let parent = base.join("sandboxes");
            let dir = parent.join(name);
            let made = std::fs::create_dir_all(&dir);
            if let Err(e) = made {
                let cg = SandboxCgroup {
                    dirs,
                    version,
                    freezer: None,
                };
                cg.remove();
                return Err(format!("create {}: {e}", dir.display()));
            }
            dirs.push(dir.clone());
            let set = (|| -> std::io::Result<()> {
                if key.is_empty() {
                    // v2: controllers must be enabled on the way down; the parent holds no process.
                    for p in [&base, &parent] {
                        let _ = write(p, "cgroup.subtree_control", "+memory +pids +cpu");
                    }
                    if limits.memory_bytes > 0 {
                        write(&dir, "memory.max", &limits.memory_bytes.to_string())?;
                        let _ = write(&dir, "memory.swap.max", "0");
                    }
                    if limits.max_pids > 0 {
                        write(&dir, "pids.max", &limits.max_pids.to_string())?;
                    }
                    if limits.cpu_quota > 0.0 {
                        write(
                            &dir,
                            "cpu.max",
                            &format!("{} 100000", (limits.cpu_quota * 100_000.0) as u64),
                        )?;
                    }
                } else {
                    let has = |c: &str| key.split(',').any(|k| k == c);
                    if has("memory") {
                        let _ = write(&dir, "memory.use_hierarchy", "1");
                        if limits.memory_bytes > 0 {
                            write(
                                &dir,
                                "memory.limit_in_bytes",
                                &limits.memory_bytes.to_string(),
                            )?;
                            let _ = write(
                                &dir,
                                "memory.memsw.limit_in_bytes",
                                &limits.memory_bytes.to_string(),
                            );
                        }
                    }
                    if has("pids") && limits.max_pids > 0 {
                        write(&dir, "pids.max", &limits.max_pids.to_string())?;
                    }
                    if has("cpu") && limits.cpu_quota > 0.0 {
                        write(&dir, "cpu.cfs_period_us", "100000")?;
                        write(
                            &dir,
                            "cpu.cfs_quota_us",
                            &((limits.cpu_quota * 100_000.0) as u64).to_string(),
                        )?;
                    }
                }
                Ok(())
            })();
            if let Err(e) = set {
                let cg = SandboxCgroup {
                    dirs,
                    version,
                    freezer: None,
                };
                cg.remove();
                return Err(format!("limits of {}: {e}", dir.display()));
            }
        }
        // Without a freezer hierarchy the sandbox still runs; only pausing it is refused.
        let freezer = match version {
            Version::V1 => freezer
                .map(|base| base.join("sandboxes").join(name))
                .filter(|dir| std::fs::create_dir_all(dir).is_ok()),
            Version::V2 => None,
        };
        Ok(SandboxCgroup {
            dirs,
            version,
            freezer,
        })
    }

    /// Stops (`frozen`) or continues every process of the sandbox, the agent included, and
    /// returns once the kernel reports the new state. Processes keep their memory, files and
    /// sockets; a frozen process uses no CPU. A freeze that does not complete in time is undone.
    pub fn freeze(&self, frozen: bool) -> Result<(), String> {
        // (directory, file written, value, file that reports the state, the line it shows)
        let (dir, file, value, report, want) = match (self.version, &self.freezer) {
            (Version::V2, _) => (
                self.dirs.first().ok_or("the sandbox has no cgroup")?,
                "cgroup.freeze",
                if frozen { "1" } else { "0" },
                "cgroup.events",
                if frozen { "frozen 1" } else { "frozen 0" },
            ),
            (Version::V1, Some(dir)) => {
                let state = if frozen { "FROZEN" } else { "THAWED" };
                (dir, "freezer.state", state, "freezer.state", state)
            }
            (Version::V1, None) => {
                return Err("this host mounts no freezer cgroup hierarchy".into())
            }
        };
        let reached = || {
            std::fs::read_to_string(dir.join(report))
                .map(|s| s.lines().any(|l| l.trim() == want))
                .unwrap_or(false)
        };
        let deadline = std::time::Instant::now() + FREEZE_TIMEOUT;
        let mut nap = std::time::Duration::from_micros(200);
        loop {
            // v1's freezer can stay FREEZING while a task is busy in the kernel: writing the
            // state again retries the freeze.
            write(dir, file, value).map_err(|e| format!("{}: {e}", dir.join(file).display()))?;
            if reached() {
                return Ok(());
            }
            if std::time::Instant::now() >= deadline {
                if frozen {
                    let _ = self.freeze(false);
                }
                return Err(format!(
                    "the sandbox's processes did not {} within {} s",
                    if frozen { "stop" } else { "continue" },
                    FREEZE_TIMEOUT.as_secs()
                ));
            }
            std::thread::sleep(nap);
            nap = (nap * 2).min(std::time::Duration::from_millis(20));
        }
    }

    /// On cgroup v1, the sandbox's `tasks` files opened for writing, for the agent's process to
    /// join by itself before it execs (writing "0"); empty on v2, where the launcher moves it with
    /// [`SandboxCgroup::join`].
    ///
    /// Why: writing a pid to `cgroup.procs` takes the kernel's global threadgroup lock for
    /// writing, which waits for an RCU grace period when the lock was idle (5-15 ms) and holds up
    /// every fork, exec and exit on the host meanwhile, the first programs of a just-claimed
    /// sandbox included (a pool starts the claimed sandbox's replacement right then). A thread
    /// moving itself through `tasks` skips that lock (see `Version::join_file` of the exec crate).
    pub fn open_self_join_files(&self) -> std::io::Result<Vec<std::fs::File>> {
        if self.version != Version::V1 {
            return Ok(vec![]);
        }
        let file = Version::V1.join_file();
        self.dirs
            .iter()
            .chain(self.freezer.iter())
            .map(|d| std::fs::OpenOptions::new().write(true).open(d.join(file)))
            .collect()
    }

    /// Moves `pid` into the sandbox's cgroups (used on v2; see `open_self_join_files`).
    pub fn join(&self, pid: i32) -> std::io::Result<()> {
        for d in &self.dirs {
            write(d, "cgroup.procs", &pid.to_string())?;
        }
        Ok(())
    }

    /// Removes the cgroups depth-first (the agent's per-exec children too). Called once every
    /// process inside is dead; an rmdir right after the last exit can see EBUSY briefly.
    pub fn remove(&self) {
        fn rm(dir: &Path) {
            if let Ok(entries) = std::fs::read_dir(dir) {
                for e in entries.flatten() {
                    if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                        rm(&e.path());
                    }
                }
            }
            for attempt in 0..50 {
                match std::fs::remove_dir(dir) {
                    Ok(()) => return,
                    Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return,
                    Err(e) if e.raw_os_error() == Some(libc::EBUSY) && attempt < 49 => {
                        std::thread::sleep(std::time::Duration::from_millis(2));
                    }
                    Err(_) => return,
                }
            }
        }
        for d in self.dirs.iter().chain(self.freezer.iter()) {
            rm(d);
        }
    }
}
