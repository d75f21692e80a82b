//! The per-sandbox cgroup the launcher puts each agent in, created under this process's own
//! cgroup (v1: one directory per controller; v2: one directory). The agent then sees it as the
//! root of its cgroup namespace and makes per-exec children inside.

use std::path::{Path, PathBuf};

use sandbox_exec::cgroup::Version;

/// Directories of this process's own cgroup: (controllers, or "" for v2, directory); the exec
/// crate's discovery.
fn own_dirs() -> Vec<(String, PathBuf)> {
    sandbox_exec::cgroup::own_dirs().unwrap_or_default()
}

/// `_native.own_cgroup_dirs()`: the same, for the local backend's reaping (Python).
#[pyo3::pyfunction]
pub fn own_cgroup_dirs() -> Vec<(String, String)> {
    own_dirs()
        .into_iter()
        .map(|(k, d)| (k, d.display().to_string()))
        .collect()
}

pub struct SandboxCgroup {
    pub dirs: Vec<PathBuf>,
    /// V1: a directory per hierarchy; V2: the one directory.
    pub version: Version,
}

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
        let mut dirs = Vec::new();
        let own = own_dirs();
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
                let cg = SandboxCgroup { dirs, version };
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
                let cg = SandboxCgroup { dirs, version };
                cg.remove();
                return Err(format!("limits of {}: {e}", dir.display()));
            }
        }
        Ok(SandboxCgroup { dirs, version })
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
        for d in &self.dirs {
            rm(d);
        }
    }
}
