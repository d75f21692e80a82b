//! Per-exec cgroups on v1 (one directory per controller hierarchy) or v2 (one directory).
//!
//! Why cgroups at all: they are the only kernel object that follows every process an exec creates,
//! including grandchildren that `setsid` away from the process group, and they enforce memory and
//! pid limits over the whole tree and report what happened (oom kills, peak memory, fork failures).
//!
//! Layout: children are created under the agent's own cgroup (or the configured parent), never
//! at a hierarchy's root unless the agent itself lives there. Which hierarchies are usable is
//! detected from /proc/self/cgroup and /proc/self/mountinfo and a probe mkdir; nothing is assumed.
//! On a hybrid host the v2 hierarchy is used only if it actually has controllers.
//!
//! cgroup v2 "no internal processes": controllers can be enabled for children only in a cgroup
//! without member processes (the root excepted). When the agent's own cgroup has processes (the
//! usual case in a container), they are all moved into a leaf child named `agent` first, then
//! `memory` and `pids` are enabled in `cgroup.subtree_control`, and exec cgroups become siblings of
//! `agent`.
//!
//! Here: detection (`Cgroups::detect`) and the counters of the enclosing cgroup; `discover.rs`
//! reads membership and mounts (also for the launcher and the local backend: `own_dirs`);
//! `slot.rs` is one exec's cgroup (`ExecCgroup`); `pool.rs` keeps idle ones for reuse;
//! `fsio.rs` reads and writes cgroup files.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use crate::error::{SetupError, SpawnError, Step};
use crate::limits::Limits;

mod discover;
mod fsio;
mod pool;
mod slot;

use discover::*;
pub use discover::{own_dirs, own_v1_dir, SANDBOX_V1_CONTROLLERS};
use fsio::*;
pub use pool::Pool;
use pool::*;
use slot::*;
pub use slot::{ExecCgroup, JoinFiles};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

impl Version {
    /// The file a child writes "0" into to join a cgroup of this version. On v1 it is `tasks`:
    /// moving the writing thread itself (the child has one) skips the kernel's global threadgroup
    /// lock, whose write side waits for an RCU grace period after an idle spell (milliseconds,
    /// several times the rest of a short exec, through `cgroup.procs`). v2 has no such file for
    /// domain cgroups.
    pub fn join_file(self) -> &'static str {
        match self {
            Version::V1 => "tasks",
            Version::V2 => "cgroup.procs",
        }
    }
}

/// The parent directories per-exec cgroups are created in (v2: all the same directory).
#[derive(Debug, Clone)]
pub struct Cgroups {
    version: Version,
    memory: Option<PathBuf>,
    pids: Option<PathBuf>,
    cpu: Option<PathBuf>,
    /// The v1 exec cgroup made to find the hierarchies writable, kept for the pool to adopt as
    /// its first idle cgroup (`Pool::new`) rather than removed and made again.
    probed: Option<Arc<Probed>>,
}

/// A v1 exec cgroup made by `detect`'s probe: its name and directories, removed when no pool
/// adopted it by the time the last `Cgroups` holding it goes.
#[derive(Debug)]
pub(super) struct Probed {
    pub(super) name: String,
    dirs: Vec<PathBuf>,
    adopted: AtomicBool,
}

impl Probed {
    /// Its name, once, for a pool that takes its directories over.
    pub(super) fn adopt(&self) -> Option<&str> {
        (!self.adopted.swap(true, Ordering::AcqRel)).then_some(self.name.as_str())
    }

    /// Removes its directories unless a pool took them over: an executor without a pool makes
    /// its first exec's cgroup, and keeps no other.
    fn discard(&self) {
        if !self.adopted.swap(true, Ordering::AcqRel) {
            for d in &self.dirs {
                let _ = fs::remove_dir(d);
            }
        }
    }
}

impl Drop for Probed {
    fn drop(&mut self) {
        if !*self.adopted.get_mut() {
            for d in &self.dirs {
                let _ = fs::remove_dir(d);
            }
        }
    }
}

/// What an exec's cgroup saw.
#[derive(Debug, Clone, Copy, Default)]
pub struct Stats {
    pub oom_kills: u64,
    pub peak_memory_bytes: Option<u64>,
    /// How often a fork failed because `pids.max` was reached.
    pub pids_max_events: u64,
    /// CPU time of every process that ran in the cgroup.
    pub cpu_usage: Option<Duration>,
}

static PROBE_COUNTER: AtomicU64 = AtomicU64::new(0);

impl Cgroups {
    /// Finds usable hierarchies. `Ok(None)`: cgroups are not usable here (read-only, no permission,
    /// v2 without controllers) and the executor runs without them. With an explicit `parent` an
    /// unusable parent is an error: the operator asked for it.
    pub fn detect(parent: Option<&Path>) -> Result<Option<Cgroups>, SetupError> {
        let mounts = cgroup_mounts().map_err(|e| setup_err("/proc/self/mountinfo", e))?;
        match parent {
            Some(p) => Self::from_parent(p, &mounts).map(Some),
            None => {
                let membership = membership().map_err(|e| setup_err("/proc/self/cgroup", e))?;
                Ok(Self::from_membership(&membership, &mounts))
            }
        }
    }

    fn from_membership(m: &Membership, mounts: &[Mount]) -> Option<Cgroups> {
        if let Some(path) = &m.v2 {
            let dir = mounts
                .iter()
                .filter(|mt| mt.fstype == "cgroup2")
                .find_map(|mt| mt.dir_of(path));
            if let Some(dir) = dir {
                if has_v2_controllers(&dir) {
                    match setup_v2(&dir) {
                        Ok(c) => return Some(c),
                        Err(e) => {
                            tracing::warn!(dir = %dir.display(), error = %e, "cgroup v2 unusable; running without cgroups");
                            return None;
                        }
                    }
                }
            }
        }
        // Each hierarchy is probed by making in it the exec cgroup a pool would make first: it
        // is either adopted by the pool or removed (`Probed`).
        let n = pool::POOL_COUNTER.fetch_add(1, Ordering::Relaxed);
        let name = format!("exec-{}-p{n}", std::process::id());
        let mut made: Vec<PathBuf> = Vec::new();
        let mut find = |ctrl: &str| -> Option<PathBuf> {
            let path = m.v1.get(ctrl)?;
            let dir = mounts
                .iter()
                .filter(|mt| mt.fstype == "cgroup" && mt.controllers().any(|c| c == ctrl))
                .find_map(|mt| mt.dir_of(path))?;
            let child = dir.join(&name);
            if made.contains(&child) {
                return Some(dir); // a hierarchy of several of these controllers
            }
            match fs::create_dir(&child) {
                Ok(()) => {
                    made.push(child);
                    Some(dir)
                }
                Err(e) => {
                    tracing::debug!(dir = %dir.display(), error = %e, "cgroup hierarchy not writable");
                    None
                }
            }
        };
        let (memory, pids, cpu) = (find("memory"), find("pids"), find("cpuacct"));
        let probed = Arc::new(Probed {
            name,
            dirs: made,
            adopted: AtomicBool::new(false),
        });
        let mut cgroups = Self::v1(memory, pids, cpu)?;
        cgroups.probed = Some(probed);
        Some(cgroups)
    }

    fn from_parent(parent: &Path, mounts: &[Mount]) -> Result<Cgroups, SetupError> {
        let unusable = |why: &str| {
            setup_err(
                &parent.display().to_string(),
                io::Error::other(why.to_string()),
            )
        };
        let mount = mounts
            .iter()
            .filter(|mt| parent.starts_with(&mt.point))
            .max_by_key(|mt| mt.point.as_os_str().len())
            .ok_or_else(|| unusable("not inside a cgroup mount"))?;
        if mount.fstype == "cgroup2" {
            return setup_v2(parent).map_err(|e| setup_err(&parent.display().to_string(), e));
        }
        // v1: the same cgroup path in each controller's hierarchy.
        let rel = parent
            .strip_prefix(&mount.point)
            .map_err(|_| unusable("bad prefix"))?;
        let find = |ctrl: &str| -> Option<PathBuf> {
            let mt = mounts
                .iter()
                .find(|mt| mt.fstype == "cgroup" && mt.controllers().any(|c| c == ctrl))?;
            let dir = mt.point.join(rel);
            fs::create_dir_all(&dir).ok()?;
            probe(&dir).then_some(dir)
        };
        Self::v1(find("memory"), find("pids"), find("cpuacct"))
            .ok_or_else(|| unusable("no usable memory or pids hierarchy"))
    }

    fn v1(memory: Option<PathBuf>, pids: Option<PathBuf>, cpu: Option<PathBuf>) -> Option<Cgroups> {
        if memory.is_none() && pids.is_none() {
            return None;
        }
        Some(Cgroups {
            version: Version::V1,
            memory,
            pids,
            cpu,
            probed: None,
        })
    }

    /// "v1" or "v2".
    pub fn version(&self) -> &'static str {
        match self.version {
            Version::V1 => "v1",
            Version::V2 => "v2",
        }
    }

    pub fn has_memory(&self) -> bool {
        self.memory.is_some()
    }

    pub fn has_pids(&self) -> bool {
        self.pids.is_some()
    }

    /// Parent directories exec cgroups are created in (deduplicated).
    pub fn parents(&self) -> Vec<&Path> {
        let mut v: Vec<&Path> = Vec::new();
        for p in [&self.memory, &self.pids, &self.cpu].into_iter().flatten() {
            if !v.contains(&p.as_path()) {
                v.push(p);
            }
        }
        v
    }

    /// Creates the cgroup `name` in every usable hierarchy and applies the limits.
    pub fn create(&self, name: &str, limits: &Limits) -> Result<ExecCgroup, SpawnError> {
        if let Some(p) = &self.probed {
            p.discard();
        }
        // On error the slot is dropped, which removes what was created so far.
        let mut slot = self.create_slot(name, false, true)?;
        slot.apply(limits)?;
        Ok(ExecCgroup::new(slot, None))
    }

    /// Creates the directories of one exec cgroup; `keep_files`: also open the files the hot path
    /// uses (v1 only); `replace`: remove an existing directory of that name first.
    fn create_slot(&self, name: &str, keep_files: bool, replace: bool) -> Result<Slot, SpawnError> {
        self.make_slot(
            name,
            keep_files,
            if replace { Made::Replace } else { Made::New },
        )
    }

    /// The slot `name` whose directories `detect`'s probe made (`Probed`), taken over as is.
    pub(in crate::cgroup) fn adopt_slot(&self, name: &str) -> Result<Slot, SpawnError> {
        self.make_slot(name, true, Made::Adopted)
    }

    fn make_slot(&self, name: &str, keep_files: bool, made: Made) -> Result<Slot, SpawnError> {
        let mut slot = Slot {
            version: self.version,
            memory: None,
            pids: None,
            cpu: None,
            dirs: Vec::new(),
            files: None,
            limits: None,
            removed: false,
        };
        let create =
            |parent: &Option<PathBuf>, slot: &mut Slot| -> Result<Option<PathBuf>, SpawnError> {
                let Some(parent) = parent else {
                    return Ok(None);
                };
                let dir = parent.join(name);
                if !slot.dirs.contains(&dir) {
                    let result = match made {
                        Made::Replace => make_dir(&dir),
                        Made::New => fs::create_dir(&dir),
                        Made::Adopted => Ok(()),
                    };
                    result.map_err(|e| isolation(Step::CreateCgroup, &dir, e))?;
                    slot.dirs.push(dir.clone());
                }
                Ok(Some(dir))
            };
        slot.memory = create(&self.memory, &mut slot)?;
        slot.pids = create(&self.pids, &mut slot)?;
        slot.cpu = create(&self.cpu, &mut slot)?;
        if keep_files && self.version == Version::V1 {
            slot.files = Some(Files::open(&slot)?);
        }
        Ok(slot)
    }
}

/// How `make_slot` comes by a slot's directories.
#[derive(Clone, Copy)]
enum Made {
    /// Made anew; an existing one of that name is an error.
    New,
    /// Made anew, replacing an existing one of that name.
    Replace,
    /// Made already (`Probed`).
    Adopted,
}

/// OOM kills so far in the cgroup this process lives in, as seen at the usual mount points (inside
/// a container: the container's own cgroup, readable even where it is not writable). Used to tell
/// an OOM kill when there is no per-exec cgroup.
pub fn enclosing_oom_kills() -> Option<u64> {
    keyed(
        Path::new("/sys/fs/cgroup/memory/memory.oom_control"),
        "oom_kill",
    )
    .or_else(|| keyed(Path::new("/sys/fs/cgroup/memory.events"), "oom_kill"))
}

/// Whether the cgroup this process lives in has a pids limit (e.g. a container's `pids_limit`).
pub fn enclosing_pids_limited() -> bool {
    enclosing_pids_max().is_some()
}

/// The pids limit of the cgroup this process lives in, if it has one. Read once: a process does
/// not change containers.
pub fn enclosing_pids_max() -> Option<u64> {
    static MAX: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    *MAX.get_or_init(|| {
        ["/sys/fs/cgroup/pids/pids.max", "/sys/fs/cgroup/pids.max"]
            .iter()
            .find_map(|p| fs::read_to_string(p).ok()?.trim().parse::<u64>().ok())
    })
}

/// The memory limit of the cgroup this process lives in, if it has one. Read once.
pub fn enclosing_memory_max() -> Option<u64> {
    static MAX: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    *MAX.get_or_init(|| {
        [
            "/sys/fs/cgroup/memory.max",
            "/sys/fs/cgroup/memory/memory.limit_in_bytes",
        ]
        .iter()
        .find_map(|p| fs::read_to_string(p).ok()?.trim().parse::<u64>().ok())
        // v1 reports "no limit" as a huge number.
        .filter(|&v| v < 1 << 60)
    })
}

/// CPUs the cgroup this process lives in may use: its CPU quota (`cpu.max`, or v1's
/// `cfs_quota_us / cfs_period_us`) rounded up, at most the CPUs this process may run on; those CPUs
/// when there is no quota. Read once.
pub fn enclosing_cpus() -> usize {
    static N: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *N.get_or_init(|| {
        let online = std::thread::available_parallelism().map_or(1, |n| n.get());
        let read = |p: &str| fs::read_to_string(p).ok();
        let quota = read("/sys/fs/cgroup/cpu.max")
            .and_then(|s| {
                let mut f = s.split_whitespace();
                Some((
                    f.next()?.parse::<f64>().ok()?,
                    f.next()?.parse::<f64>().ok()?,
                ))
            })
            .or_else(|| {
                let q = read("/sys/fs/cgroup/cpu/cpu.cfs_quota_us")?
                    .trim()
                    .parse::<f64>()
                    .ok()?;
                let p = read("/sys/fs/cgroup/cpu/cpu.cfs_period_us")?
                    .trim()
                    .parse::<f64>()
                    .ok()?;
                Some((q, p))
            });
        match quota {
            Some((q, p)) if q > 0.0 && p > 0.0 => ((q / p).ceil() as usize).clamp(1, online),
            _ => online,
        }
    })
}

/// Whether creating a child cgroup works here (permissions, read-only mounts).
fn probe(dir: &Path) -> bool {
    let n = PROBE_COUNTER.fetch_add(1, Ordering::Relaxed);
    let p = dir.join(format!("probe-{}-{n}", std::process::id()));
    match fs::create_dir(&p) {
        Ok(()) => fs::remove_dir(&p).is_ok(),
        Err(e) => {
            tracing::debug!(dir = %dir.display(), error = %e, "cgroup hierarchy not writable");
            false
        }
    }
}

fn has_v2_controllers(dir: &Path) -> bool {
    fs::read_to_string(dir.join("cgroup.controllers"))
        .map(|s| s.split_whitespace().any(|c| c == "memory" || c == "pids"))
        .unwrap_or(false)
}

/// Enables `memory` and `pids` for children of `dir` (moving its processes into the `agent` leaf
/// if needed, see the module doc) and checks a child can be created.
fn setup_v2(dir: &Path) -> io::Result<Cgroups> {
    let available = fs::read_to_string(dir.join("cgroup.controllers"))?;
    let wanted: Vec<&str> = ["memory", "pids"]
        .into_iter()
        .filter(|c| available.split_whitespace().any(|a| a == *c))
        .collect();
    if wanted.is_empty() {
        return Err(io::Error::other("no memory or pids controller"));
    }
    let enabled = |c: &str| {
        fs::read_to_string(dir.join("cgroup.subtree_control"))
            .map(|s| s.split_whitespace().any(|e| e == c))
            .unwrap_or(false)
    };
    for c in &wanted {
        if enabled(c) {
            continue;
        }
        let control = dir.join("cgroup.subtree_control");
        match write_file(&control, &format!("+{c}")) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                move_into_leaf(dir)?;
                write_file(&control, &format!("+{c}"))?;
            }
            Err(e) => return Err(e),
        }
    }
    if !probe(dir) {
        return Err(io::Error::from_raw_os_error(libc::EACCES));
    }
    let dir = dir.to_path_buf();
    let memory = enabled("memory").then(|| dir.clone());
    let pids = enabled("pids").then(|| dir.clone());
    Ok(Cgroups {
        version: Version::V2,
        memory,
        pids,
        cpu: Some(dir),
        probed: None,
    })
}

fn move_into_leaf(dir: &Path) -> io::Result<()> {
    let leaf = dir.join("agent");
    match fs::create_dir(&leaf) {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
        _ => {}
    }
    let procs = fs::read_to_string(dir.join("cgroup.procs"))?;
    for pid in procs.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if let Err(e) = write_file(&leaf.join("cgroup.procs"), pid) {
            // A process that exited meanwhile is fine; anything else leaves the parent non-empty.
            if e.raw_os_error() != Some(libc::ESRCH) {
                return Err(e);
            }
        }
    }
    tracing::info!(leaf = %leaf.display(), "moved the agent's processes into a leaf cgroup");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_hybrid_membership() {
        let m =
            parse_membership("9:name=systemd:/\n8:pids:/\n4:memory:/a/b\n2:cpu,cpuacct:/c\n0::/\n");
        assert_eq!(m.v1.get("memory").map(String::as_str), Some("/a/b"));
        assert_eq!(m.v1.get("cpuacct").map(String::as_str), Some("/c"));
        assert_eq!(m.v1.get("cpu").map(String::as_str), Some("/c"));
        assert_eq!(m.v2.as_deref(), Some("/"));
    }

    #[test]
    fn parses_mountinfo() {
        let s = "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n\
                 41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n\
                 42 31 0:39 /x /mnt/with\\040space rw shared:5 - cgroup2 none rw\n\
                 1 0 8:1 / / rw - ext4 /dev/sda rw\n";
        let m = parse_mountinfo(s);
        assert_eq!(m.len(), 3);
        assert!(m[0].controllers().any(|c| c == "memory"));
        assert_eq!(m[1].fstype, "cgroup2");
        assert_eq!(m[2].point, PathBuf::from("/mnt/with space"));
        assert_eq!(m[2].root, "/x");
    }

    #[test]
    fn keyed_files() {
        let dir = std::env::temp_dir().join(format!("keyed-{}", std::process::id()));
        fs::write(&dir, "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n").unwrap();
        assert_eq!(keyed(&dir, "oom_kill"), Some(3));
        assert_eq!(keyed(&dir, "max"), None);
        fs::remove_file(&dir).unwrap();
    }
}
