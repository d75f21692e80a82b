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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

impl Version {
    /// The file a child writes "0" into to join a cgroup of this version. On v1 it is `tasks`:
    /// moving the writing thread itself (the child has one) skips the kernel's global threadgroup
    /// lock, whose write side waits for an RCU grace period after an idle spell (measured here:
    /// an exec after 50 ms of quiet took 7-11 ms instead of 2 through `cgroup.procs`). v2 has no
    /// such file for domain cgroups.
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
        let find = |ctrl: &str| -> Option<PathBuf> {
            let path = m.v1.get(ctrl)?;
            let dir = mounts
                .iter()
                .filter(|mt| mt.fstype == "cgroup" && mt.controllers().any(|c| c == ctrl))
                .find_map(|mt| mt.dir_of(path))?;
            probe(&dir).then_some(dir)
        };
        Self::v1(find("memory"), find("pids"), find("cpuacct"))
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
        // On error the slot is dropped, which removes what was created so far.
        let mut slot = self.create_slot(name, false, true)?;
        slot.apply(limits)?;
        Ok(ExecCgroup::new(slot, None))
    }

    /// Creates the directories of one exec cgroup; `keep_files`: also open the files the hot path
    /// uses (v1 only); `replace`: remove an existing directory of that name first.
    fn create_slot(&self, name: &str, keep_files: bool, replace: bool) -> Result<Slot, SpawnError> {
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
                    let made = if replace {
                        make_dir(&dir)
                    } else {
                        fs::create_dir(&dir)
                    };
                    made.map_err(|e| isolation(Step::CreateCgroup, &dir, e))?;
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

/// Idle exec cgroups kept for reuse, so that an exec neither creates nor removes directories
/// (mkdir, limit writes and rmdir in three v1 hierarchies, and the first charges in a fresh memory
/// cgroup, cost about 0.3 ms per exec on a small VM). cgroup v1 only: its counters can be reset (peak memory, CPU usage) and the
/// others start at zero because a cgroup whose exec raised one is not reused.
///
/// A cgroup goes back to the pool only when its exec is over and it is clean: no process left, no
/// oom kill and no fork refused by `pids.max` in its history, and (almost) no memory still
/// charged to it, so the next exec starts with its full limit. The limits are rewritten only when
/// the next exec asks for different ones.
pub struct Pool {
    cgroups: Cgroups,
    idle: Mutex<Vec<Slot>>,
    max_idle: usize,
    /// Set by `drain`, cleared by the next `take`: cgroups of execs that end meanwhile are removed.
    drained: AtomicBool,
}

/// Memory a cgroup may still have charged (kernel objects, page cache of files its programs wrote)
/// and be reused; above it the cgroup is removed and the charge leaves with it.
const REUSE_MAX_CHARGE: u64 = 1 << 20;

static POOL_COUNTER: AtomicU64 = AtomicU64::new(0);

impl Pool {
    /// A pool keeping up to `max_idle` idle cgroups, `prefill` of them created now. `None` where
    /// pooling does not apply (cgroup v2, `max_idle` 0).
    pub fn new(cgroups: &Cgroups, max_idle: usize, prefill: usize) -> Option<Arc<Pool>> {
        if cgroups.version != Version::V1 || max_idle == 0 {
            return None;
        }
        let pool = Arc::new(Pool {
            cgroups: cgroups.clone(),
            idle: Mutex::new(Vec::new()),
            max_idle,
            drained: AtomicBool::new(false),
        });
        for _ in 0..prefill.min(max_idle) {
            match pool.fresh() {
                Ok(slot) => pool.lock().push(slot),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot pre-create exec cgroups");
                    break;
                }
            }
        }
        Some(pool)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Slot>> {
        self.idle.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new cgroup under a name nobody uses: unlike a per-exec cgroup it never takes over an
    /// existing directory, which could be an idle cgroup of another executor sharing the parent.
    fn fresh(&self) -> Result<Slot, SpawnError> {
        let mut tries = 0;
        loop {
            let n = POOL_COUNTER.fetch_add(1, Ordering::Relaxed);
            let name = format!("exec-{}-p{n}", std::process::id());
            match self.cgroups.create_slot(&name, true, false) {
                Err(SpawnError::Isolation {
                    step: Step::CreateCgroup,
                    source,
                }) if source.kind() == io::ErrorKind::AlreadyExists && tries < 64 => tries += 1,
                r => return r,
            }
        }
    }

    /// An exec cgroup with `limits` applied: an idle one if there is one, else a new one.
    pub fn take(self: &Arc<Self>, limits: &Limits) -> Result<ExecCgroup, SpawnError> {
        self.drained.store(false, Ordering::Relaxed);
        let idle = self.lock().pop();
        if let Some(mut slot) = idle {
            match slot.apply(limits) {
                Ok(()) => return Ok(ExecCgroup::new(slot, Some(self.clone()))),
                // E.g. a limit below what is still charged: dropping the slot removes it.
                Err(e) => tracing::debug!(error = %e, "idle exec cgroup not reusable"),
            }
        }
        let mut slot = self.fresh()?;
        slot.apply(limits)?;
        Ok(ExecCgroup::new(slot, Some(self.clone())))
    }

    fn put(&self, slot: Slot) {
        let mut idle = self.lock();
        if idle.len() < self.max_idle && !self.drained.load(Ordering::Relaxed) {
            idle.push(slot);
            return;
        }
        drop(idle);
        drop(slot); // removes it
    }

    /// Number of idle cgroups.
    pub fn idle(&self) -> usize {
        self.lock().len()
    }

    /// Removes every idle cgroup (shutdown), and those of execs ending until the next exec starts.
    pub fn drain(&self) {
        let idle = {
            let mut idle = self.lock();
            self.drained.store(true, Ordering::Relaxed);
            std::mem::take(&mut *idle)
        };
        drop(idle);
    }
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("idle", &self.idle())
            .field("max_idle", &self.max_idle)
            .finish()
    }
}

/// Files of a pooled v1 exec cgroup, open for its lifetime so the hot path makes no path lookups.
/// Only files the kernel regenerates on every read at offset 0 are read this way (`cgroup.procs`
/// on v1 is not: it serves a cached pid list per open file, so it is always reopened).
#[derive(Debug)]
struct Files {
    /// The join file (see [`Version::join_file`]) of every directory, write-only.
    join: Vec<fs::File>,
    pids_current: Option<fs::File>,
    pids_events: Option<fs::File>,
    oom_control: Option<fs::File>,
    /// `memory.max_usage_in_bytes`: read for the peak, written 0 to reset it.
    max_usage: Option<fs::File>,
    usage: Option<fs::File>,
    /// `cpuacct.usage`: read, written 0 to reset it.
    cpu_usage: Option<fs::File>,
}

impl Files {
    fn open(slot: &Slot) -> Result<Files, SpawnError> {
        let open = |dir: &Path, name: &str, write: bool, read: bool| {
            let p = dir.join(name);
            fs::OpenOptions::new()
                .read(read)
                .write(write)
                .open(&p)
                .map_err(|e| isolation(Step::CreateCgroup, &p, e))
        };
        let join = slot
            .dirs
            .iter()
            .map(|d| open(d, slot.version.join_file(), true, false))
            .collect::<Result<_, _>>()?;
        let mem = slot.memory.as_deref();
        let pids = slot.pids.as_deref();
        let opt = |dir: Option<&Path>, name: &str, write: bool| {
            dir.map(|d| open(d, name, write, true)).transpose()
        };
        Ok(Files {
            join,
            pids_current: opt(pids, "pids.current", false)?,
            pids_events: opt(pids, "pids.events", false)?,
            oom_control: opt(mem, "memory.oom_control", false)?,
            max_usage: opt(mem, "memory.max_usage_in_bytes", true)?,
            usage: opt(mem, "memory.usage_in_bytes", false)?,
            cpu_usage: opt(slot.cpu.as_deref(), "cpuacct.usage", true)?,
        })
    }
}

/// The directories of one exec cgroup (and, when pooled, its open files). Dropping it kills what
/// is left inside and removes it (retrying in the background if the kernel still reports it busy).
#[derive(Debug)]
struct Slot {
    version: Version,
    memory: Option<PathBuf>,
    pids: Option<PathBuf>,
    cpu: Option<PathBuf>,
    dirs: Vec<PathBuf>,
    files: Option<Files>,
    /// Limits written last (memory bytes, max pids).
    limits: Option<(u64, u32)>,
    removed: bool,
}

/// One exec's cgroup(s): a handle on a [`Slot`] for the time of one exec. Dropping it kills what is
/// left inside and removes it; [`ExecCgroup::recycle`] hands a clean one back to its pool instead.
/// Once either happened every method is a no-op: the directories may already serve another exec.
#[derive(Debug)]
pub struct ExecCgroup {
    dirs: Vec<PathBuf>,
    slot: RwLock<Option<Slot>>,
    pool: Option<Arc<Pool>>,
}

/// Join files (see [`Version::join_file`]) for the child to write itself into.
pub struct JoinFiles {
    _opened: Vec<OwnedFd>,
    raw: Vec<RawFd>,
}

impl JoinFiles {
    pub fn raw(&self) -> &[RawFd] {
        &self.raw
    }
}

impl ExecCgroup {
    fn new(slot: Slot, pool: Option<Arc<Pool>>) -> ExecCgroup {
        ExecCgroup {
            dirs: slot.dirs.clone(),
            slot: RwLock::new(Some(slot)),
            pool,
        }
    }

    /// Runs `f` on the slot while this handle still owns it.
    fn with<R>(&self, f: impl FnOnce(&Slot) -> R) -> Option<R> {
        let g = self.slot.read().unwrap_or_else(|e| e.into_inner());
        g.as_ref().map(f)
    }

    /// Directories of this cgroup, one per hierarchy.
    pub fn dirs(&self) -> &[PathBuf] {
        &self.dirs
    }

    /// Whether an unprivileged process may join this cgroup itself through [`Self::join_files`]'s
    /// files (v1: a thread moving itself passes the kernel's owner check whatever its uid). On v2
    /// older kernels check the writer's own permission on `cgroup.procs`, and moving oneself saves
    /// nothing there, so a privileged process moves it instead.
    pub fn joinable_by_self(&self) -> bool {
        self.with(|s| s.version == Version::V1).unwrap_or(false)
    }

    /// Whether this cgroup came from (and goes back to) a pool.
    pub fn is_pooled(&self) -> bool {
        self.pool.is_some()
    }

    /// The join file of every hierarchy (see [`Version::join_file`]), open for the child to write
    /// "0" (itself) into after the clone; a process that writes another pid there takes the slow
    /// path that `join_file` avoids.
    /// They stay valid while `self` lives (the slot is only given up at the end of the exec).
    pub fn join_files(&self) -> Result<JoinFiles, SpawnError> {
        self.with(|s| match &s.files {
            Some(f) => Ok(JoinFiles {
                _opened: Vec::new(),
                raw: f.join.iter().map(|f| f.as_raw_fd()).collect(),
            }),
            None => {
                let opened = s.open_join_files()?;
                Ok(JoinFiles {
                    raw: opened.iter().map(|f| f.as_raw_fd()).collect(),
                    _opened: opened,
                })
            }
        })
        .unwrap_or_else(|| {
            Err(SpawnError::Isolation {
                step: Step::JoinCgroup,
                source: io::Error::from_raw_os_error(libc::ENOENT),
            })
        })
    }

    /// Processes in the cgroup now.
    pub fn procs(&self) -> Vec<libc::pid_t> {
        self.with(Slot::procs).unwrap_or_default()
    }

    pub fn is_empty(&self) -> bool {
        self.with(Slot::is_empty).unwrap_or(true)
    }

    /// SIGKILLs everything in the cgroup (see [`Slot::kill`]).
    pub fn kill(&self) {
        self.with(Slot::kill);
    }

    /// CPU time used so far by everything in the cgroup.
    pub fn cpu_usage(&self) -> Option<Duration> {
        self.with(Slot::cpu_usage).flatten()
    }

    /// Whether CPU usage is accounted (`cpu_usage` can answer), without reading it.
    pub fn has_cpu(&self) -> bool {
        self.with(|s| s.cpu.is_some()).unwrap_or(false)
    }

    pub fn stats(&self) -> Stats {
        self.with(Slot::stats).unwrap_or_default()
    }

    /// One removal attempt of every directory; `Err` (EBUSY) while processes are still exiting.
    pub fn remove(&self) -> io::Result<()> {
        let mut g = self.slot.write().unwrap_or_else(|e| e.into_inner());
        match g.as_mut() {
            Some(s) => s.remove(),
            None => Ok(()),
        }
    }

    /// Kills until nothing is left, polling (bounded: a process stuck in the kernel can outlast
    /// it). `false` if processes remain.
    pub async fn kill_until_empty(&self) -> bool {
        let mut delay = Duration::from_millis(1);
        for _ in 0..60 {
            // Empty already (the usual end of an exec): nothing to kill.
            let empty = self
                .with(|s| {
                    s.is_empty() || {
                        s.kill();
                        s.is_empty()
                    }
                })
                .unwrap_or(true);
            if empty {
                return true;
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_millis(200));
        }
        false
    }

    /// Removes the (empty) cgroup, retrying while the kernel still reports it busy (bounded).
    pub async fn remove_retrying(&self) -> io::Result<()> {
        let mut delay = Duration::from_millis(1);
        let mut last = Ok(());
        for _ in 0..40 {
            last = self.remove();
            if last.is_ok() {
                return last;
            }
            self.kill();
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_millis(200));
        }
        last
    }

    /// Hands the cgroup back to its pool if it is clean (see [`Pool`]), given the `stats` of the
    /// exec that just ended in it. `false`: not pooled or not reusable, remove it as usual.
    pub fn recycle(&self, stats: &Stats) -> bool {
        let Some(pool) = &self.pool else {
            return false;
        };
        if stats.oom_kills != 0 || stats.pids_max_events != 0 {
            return false;
        }
        let mut g = self.slot.write().unwrap_or_else(|e| e.into_inner());
        if !g.as_ref().is_some_and(Slot::reset_for_reuse) {
            return false;
        }
        if let Some(slot) = g.take() {
            drop(g);
            pool.put(slot);
        }
        true
    }
}

impl Slot {
    fn apply(&mut self, limits: &Limits) -> Result<(), SpawnError> {
        let want = (limits.memory_bytes, limits.max_pids);
        if self.limits == Some(want) {
            return Ok(());
        }
        let before = self.limits.take();
        let set = |dir: &Path, file: &str, value: &str| {
            write_file(&dir.join(file), value)
                .map_err(|e| isolation(Step::CgroupLimit, &dir.join(file), e))
        };
        let mem = limits.memory_bytes.to_string();
        if let Some(dir) = &self.memory {
            match self.version {
                Version::V1 => {
                    // Without memsw the program could swap past its limit (absent: no swap
                    // accounting). v1 wants limit <= memsw limit at all times: when raising, memsw
                    // goes first.
                    let memsw = dir.join("memory.memsw.limit_in_bytes").exists();
                    let raising = before.is_some_and(|(m, _)| limits.memory_bytes > m);
                    if memsw && raising {
                        set(dir, "memory.memsw.limit_in_bytes", &mem)?;
                    }
                    set(dir, "memory.limit_in_bytes", &mem)?;
                    if memsw && !raising {
                        set(dir, "memory.memsw.limit_in_bytes", &mem)?;
                    }
                }
                Version::V2 => {
                    set(dir, "memory.max", &mem)?;
                    if dir.join("memory.swap.max").exists() {
                        set(dir, "memory.swap.max", "0")?;
                    }
                    // An exec is one unit: an oom kill takes the whole group (best effort, 4.19+).
                    let _ = write_file(&dir.join("memory.oom.group"), "1");
                }
            }
        }
        if let Some(dir) = &self.pids {
            set(dir, "pids.max", &limits.max_pids.to_string())?;
        }
        self.limits = Some(want);
        Ok(())
    }

    fn open_join_files(&self) -> Result<Vec<OwnedFd>, SpawnError> {
        self.dirs
            .iter()
            .map(|d| {
                let p = d.join(self.version.join_file());
                fs::OpenOptions::new()
                    .write(true)
                    .open(&p)
                    .map(OwnedFd::from)
                    .map_err(|e| isolation(Step::JoinCgroup, &p, e))
            })
            .collect()
    }

    /// Tasks charged to the pids cgroup (pooled cgroups only): 0 means no process at all, not
    /// even one being forked. Zombies count until reaped.
    fn pids_current(&self) -> Option<u64> {
        read_at_u64(self.files.as_ref()?.pids_current.as_ref()?)
    }

    /// Processes in the cgroup now.
    fn procs(&self) -> Vec<libc::pid_t> {
        if self.pids_current() == Some(0) {
            return Vec::new();
        }
        let mut all = HashSet::new();
        for d in &self.dirs {
            if let Ok(s) = fs::read_to_string(d.join("cgroup.procs")) {
                all.extend(
                    s.lines()
                        .filter_map(|l| l.trim().parse::<libc::pid_t>().ok()),
                );
            }
        }
        all.into_iter().collect()
    }

    fn is_empty(&self) -> bool {
        self.procs().is_empty()
    }

    /// SIGKILLs everything in the cgroup. v2 with `cgroup.kill` does it atomically (new forks
    /// included); otherwise kill the listed processes, a few passes to catch fresh forks (the
    /// pids limit bounds how many there can be). Callers that need emptiness poll `is_empty`.
    fn kill(&self) {
        if self.version == Version::V2 {
            if let Some(d) = self.dirs.first() {
                if write_file(&d.join("cgroup.kill"), "1").is_ok() {
                    return;
                }
            }
        }
        let mut seen = HashSet::new();
        for _ in 0..16 {
            let procs = self.procs();
            let mut fresh = false;
            for pid in procs {
                if pid > 0 {
                    fresh |= seen.insert(pid);
                    // SAFETY: plain syscall. The pid is in our cgroup right now; a recycled pid
                    // would have to be created inside this cgroup, i.e. be ours to kill anyway.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
            }
            if !fresh {
                break;
            }
        }
    }

    fn cpu_usage(&self) -> Option<Duration> {
        let dir = self.cpu.as_ref()?;
        if let Some(f) = self.files.as_ref().and_then(|f| f.cpu_usage.as_ref()) {
            return read_at_u64(f).map(Duration::from_nanos);
        }
        match self.version {
            Version::V1 => read_u64(&dir.join("cpuacct.usage")).map(Duration::from_nanos),
            Version::V2 => keyed(&dir.join("cpu.stat"), "usage_usec").map(Duration::from_micros),
        }
    }

    fn stats(&self) -> Stats {
        let mut s = Stats {
            cpu_usage: self.cpu_usage(),
            ..Stats::default()
        };
        if let Some(f) = &self.files {
            // Pooled (v1): the same files, already open.
            let keyed_at = |f: &Option<fs::File>, key: &str| {
                f.as_ref()
                    .and_then(|f| keyed_in(&read_at_string(f)?, key))
                    .unwrap_or(0)
            };
            s.oom_kills = keyed_at(&f.oom_control, "oom_kill");
            s.peak_memory_bytes = f.max_usage.as_ref().and_then(read_at_u64);
            s.pids_max_events = keyed_at(&f.pids_events, "max");
            return s;
        }
        if let Some(dir) = &self.memory {
            match self.version {
                Version::V1 => {
                    s.oom_kills = keyed(&dir.join("memory.oom_control"), "oom_kill").unwrap_or(0);
                    s.peak_memory_bytes = read_u64(&dir.join("memory.max_usage_in_bytes"));
                }
                Version::V2 => {
                    s.oom_kills = keyed(&dir.join("memory.events"), "oom_kill").unwrap_or(0);
                    s.peak_memory_bytes = read_u64(&dir.join("memory.peak"));
                }
            }
        }
        if let Some(dir) = &self.pids {
            s.pids_max_events = keyed(&dir.join("pids.events"), "max").unwrap_or(0);
        }
        s
    }

    /// Readies a pooled cgroup for the next exec: `false` if it is not clean (processes or zombies
    /// left, too much memory still charged) or a counter cannot be reset.
    fn reset_for_reuse(&self) -> bool {
        let Some(f) = &self.files else {
            return false;
        };
        // With a pids hierarchy, not even a zombie may be left: it still counts against pids.max.
        let empty = match self.pids {
            Some(_) => self.pids_current() == Some(0),
            None => self.is_empty(),
        };
        if self.removed || !empty {
            return false;
        }
        if let Some(usage) = &f.usage {
            if read_at_u64(usage).is_none_or(|u| u > REUSE_MAX_CHARGE) {
                return false;
            }
        }
        // Peak memory restarts from what is charged now; CPU usage from zero.
        let reset = |f: &Option<fs::File>| f.as_ref().is_none_or(|f| f.write_at(b"0", 0).is_ok());
        reset(&f.max_usage) && reset(&f.cpu_usage)
    }

    /// One removal attempt of every directory; `Err` (EBUSY) while processes are still exiting.
    fn remove(&mut self) -> io::Result<()> {
        // Open files do not keep a cgroup from being removed, but are of no use afterwards.
        self.files = None;
        let mut result = Ok(());
        for d in &self.dirs {
            match fs::remove_dir(d) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => result = Err(e),
            }
        }
        if result.is_ok() {
            self.removed = true;
        }
        result
    }

    fn blocking_kill_and_remove(&mut self) -> io::Result<()> {
        let mut delay = Duration::from_millis(1);
        let mut last = Ok(());
        for _ in 0..50 {
            self.kill();
            if self.is_empty() {
                last = self.remove();
                if last.is_ok() {
                    return Ok(());
                }
            }
            std::thread::sleep(delay);
            delay = (delay * 2).min(Duration::from_millis(200));
        }
        last.and(Err(io::Error::other("cgroup still has processes")))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if self.removed || self.dirs.is_empty() {
            return;
        }
        self.kill();
        if self.is_empty() && self.remove().is_ok() {
            return;
        }
        // Still busy (processes exiting): finish off the runtime that is dropping us, on a
        // short-lived thread so a cancelled supervisor never blocks a runtime shutdown.
        let mut rest = Slot {
            version: self.version,
            memory: None,
            pids: None,
            cpu: None,
            dirs: std::mem::take(&mut self.dirs),
            files: None,
            limits: None,
            removed: false,
        };
        let spawned = std::thread::Builder::new()
            .name("cgroup-cleanup".into())
            .spawn(move || {
                if let Err(e) = rest.blocking_kill_and_remove() {
                    tracing::warn!(dirs = ?rest.dirs, error = %e, "cgroup left behind");
                }
                // Given up or done: nothing left for `Drop` to try again.
                drop(std::mem::take(&mut rest.dirs));
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "cannot start cgroup cleanup");
        }
    }
}

fn isolation(step: Step, path: &Path, e: io::Error) -> SpawnError {
    SpawnError::Isolation {
        step,
        source: io::Error::new(e.kind(), format!("{}: {e}", path.display())),
    }
}

fn setup_err(path: &str, source: io::Error) -> SetupError {
    SetupError::Cgroup {
        path: path.to_string(),
        source,
    }
}

/// mkdir; a leftover of the same name (a crashed agent with the same pid) is removed first.
fn make_dir(dir: &Path) -> io::Result<()> {
    match fs::create_dir(dir) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            fs::remove_dir(dir)?;
            fs::create_dir(dir)
        }
        r => r,
    }
}

fn write_file(path: &Path, value: &str) -> io::Result<()> {
    fs::OpenOptions::new()
        .write(true)
        .open(path)?
        .write_all(value.as_bytes())
}

fn read_u64(path: &Path) -> Option<u64> {
    fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The whole content of an open cgroup file, read from offset 0 (the kernel regenerates it).
/// These files are produced in one go, so a read shorter than asked for is the end: no second
/// read just to see end-of-file.
fn read_at_string(f: &fs::File) -> Option<String> {
    let mut buf = [0u8; 512];
    let mut n = 0;
    while n < buf.len() {
        match f.read_at(&mut buf[n..], n as u64) {
            Ok(0) => break,
            Ok(k) => {
                n += k;
                if n < buf.len() {
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    String::from_utf8(buf[..n].to_vec()).ok()
}

fn read_at_u64(f: &fs::File) -> Option<u64> {
    read_at_string(f)?.trim().parse().ok()
}

/// Value of `key` in a flat-keyed file ("key value" per line).
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
/// Read once: a process does not change containers.
pub fn enclosing_pids_limited() -> bool {
    static LIMITED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *LIMITED.get_or_init(|| {
        ["/sys/fs/cgroup/pids/pids.max", "/sys/fs/cgroup/pids.max"]
            .iter()
            .any(|p| fs::read_to_string(p).is_ok_and(|v| v.trim().parse::<u64>().is_ok()))
    })
}

fn keyed(path: &Path, key: &str) -> Option<u64> {
    keyed_in(&fs::read_to_string(path).ok()?, key)
}

fn keyed_in(s: &str, key: &str) -> Option<u64> {
    s.lines().find_map(|l| {
        let mut it = l.split_whitespace();
        (it.next() == Some(key))
            .then(|| it.next()?.parse().ok())
            .flatten()
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

/// Membership of this process, from /proc/self/cgroup.
#[derive(Debug, Default)]
struct Membership {
    /// controller -> cgroup path (v1 hierarchies).
    v1: HashMap<String, String>,
    /// The v2 path ("0::path").
    v2: Option<String>,
}

fn membership() -> io::Result<Membership> {
    Ok(parse_membership(&fs::read_to_string("/proc/self/cgroup")?))
}

fn parse_membership(s: &str) -> Membership {
    let mut m = Membership::default();
    for line in s.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(ctrls), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        if id == "0" && ctrls.is_empty() {
            m.v2 = Some(path.to_string());
        } else {
            for c in ctrls.split(',').filter(|c| !c.is_empty()) {
                m.v1.insert(c.to_string(), path.to_string());
            }
        }
    }
    m
}

/// A cgroup mount from /proc/self/mountinfo.
#[derive(Debug, Clone)]
struct Mount {
    root: String,
    point: PathBuf,
    fstype: String,
    super_opts: String,
}

impl Mount {
    fn controllers(&self) -> impl Iterator<Item = &str> {
        self.super_opts.split(',')
    }

    /// The directory of cgroup `path` in this mount, if the mount shows it.
    fn dir_of(&self, path: &str) -> Option<PathBuf> {
        let rel = if self.root == "/" {
            path
        } else {
            let rest = path.strip_prefix(self.root.as_str())?;
            if !(rest.is_empty() || rest.starts_with('/')) {
                return None;
            }
            rest
        };
        let dir = self.point.join(rel.trim_start_matches('/'));
        dir.is_dir().then_some(dir)
    }
}

fn cgroup_mounts() -> io::Result<Vec<Mount>> {
    Ok(parse_mountinfo(&fs::read_to_string(
        "/proc/self/mountinfo",
    )?))
}

fn parse_mountinfo(s: &str) -> Vec<Mount> {
    s.lines()
        .filter_map(|line| {
            let (pre, post) = line.split_once(" - ")?;
            let pre: Vec<&str> = pre.split(' ').collect();
            let mut post = post.split(' ');
            let fstype = post.next()?;
            let _source = post.next()?;
            let super_opts = post.next().unwrap_or("");
            if fstype != "cgroup" && fstype != "cgroup2" {
                return None;
            }
            Some(Mount {
                root: unescape(pre.get(3)?),
                point: PathBuf::from(unescape(pre.get(4)?)),
                fstype: fstype.to_string(),
                super_opts: super_opts.to_string(),
            })
        })
        .collect()
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') as u32 * 64
                + (b[i + 2] - b'0') as u32 * 8
                + (b[i + 3] - b'0') as u32;
            if let Ok(v) = u8::try_from(v) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
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
