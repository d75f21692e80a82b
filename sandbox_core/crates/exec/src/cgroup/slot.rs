//! One exec's cgroup: its directories, its open files, its limits and stats, its removal
//! (`Slot`, `ExecCgroup`).

use super::*;

/// Files of a pooled v1 exec cgroup, open for its lifetime so the hot path makes no path lookups.
/// Only files the kernel regenerates on every read at offset 0 are read this way (`cgroup.procs`
/// on v1 is not: it serves a cached pid list per open file, so it is always reopened).
#[derive(Debug)]
pub(super) struct Files {
    /// The join file (see [`Version::join_file`]) of every directory, write-only.
    pub(super) join: Vec<fs::File>,
    pub(super) pids_current: Option<fs::File>,
    pub(super) pids_events: Option<fs::File>,
    pub(super) oom_control: Option<fs::File>,
    /// `memory.max_usage_in_bytes`: read for the peak, written 0 to reset it.
    pub(super) max_usage: Option<fs::File>,
    pub(super) usage: Option<fs::File>,
    /// `cpuacct.usage`: read, written 0 to reset it.
    pub(super) cpu_usage: Option<fs::File>,
}

impl Files {
    pub(super) fn open(slot: &Slot) -> Result<Files, SpawnError> {
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
pub(super) struct Slot {
    pub(super) version: Version,
    pub(super) memory: Option<PathBuf>,
    pub(super) pids: Option<PathBuf>,
    pub(super) cpu: Option<PathBuf>,
    pub(super) dirs: Vec<PathBuf>,
    pub(super) files: Option<Files>,
    /// Limits written last (memory bytes, max pids).
    pub(super) limits: Option<(u64, u32)>,
    pub(super) removed: bool,
}

/// One exec's cgroup(s): a handle on a [`Slot`] for the time of one exec. Dropping it kills what is
/// left inside and removes it; [`ExecCgroup::recycle`] hands a clean one back to its pool instead.
/// Once either happened every method is a no-op: the directories may already serve another exec.
#[derive(Debug)]
pub struct ExecCgroup {
    pub(super) dirs: Vec<PathBuf>,
    pub(super) slot: RwLock<Option<Slot>>,
    pub(super) pool: Option<Arc<Pool>>,
}

/// Join files (see [`Version::join_file`]) for the child to write itself into.
pub struct JoinFiles {
    pub(super) _opened: Vec<OwnedFd>,
    pub(super) raw: Vec<RawFd>,
}

impl JoinFiles {
    pub fn raw(&self) -> &[RawFd] {
        &self.raw
    }
}

impl ExecCgroup {
    pub(super) fn new(slot: Slot, pool: Option<Arc<Pool>>) -> ExecCgroup {
        ExecCgroup {
            dirs: slot.dirs.clone(),
            slot: RwLock::new(Some(slot)),
            pool,
        }
    }

    /// Runs `f` on the slot while this handle still owns it.
    pub(super) fn with<R>(&self, f: impl FnOnce(&Slot) -> R) -> Option<R> {
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
    pub(super) fn apply(&mut self, limits: &Limits) -> Result<(), SpawnError> {
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

    pub(super) fn open_join_files(&self) -> Result<Vec<OwnedFd>, SpawnError> {
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
    pub(super) fn pids_current(&self) -> Option<u64> {
        read_at_u64(self.files.as_ref()?.pids_current.as_ref()?)
    }

    /// Processes in the cgroup now.
    pub(super) fn procs(&self) -> Vec<libc::pid_t> {
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

    pub(super) fn is_empty(&self) -> bool {
        self.procs().is_empty()
    }

    /// SIGKILLs everything in the cgroup. v2 with `cgroup.kill` does it atomically (new forks
    /// included); otherwise kill the listed processes, a few passes to catch fresh forks (the
    /// pids limit bounds how many there can be). Callers that need emptiness poll `is_empty`.
    pub(super) fn kill(&self) {
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

    pub(super) fn cpu_usage(&self) -> Option<Duration> {
        let dir = self.cpu.as_ref()?;
        if let Some(f) = self.files.as_ref().and_then(|f| f.cpu_usage.as_ref()) {
            return read_at_u64(f).map(Duration::from_nanos);
        }
        match self.version {
            Version::V1 => read_u64(&dir.join("cpuacct.usage")).map(Duration::from_nanos),
            Version::V2 => keyed(&dir.join("cpu.stat"), "usage_usec").map(Duration::from_micros),
        }
    }

    pub(super) fn stats(&self) -> Stats {
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
    pub(super) fn reset_for_reuse(&self) -> bool {
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
    pub(super) fn remove(&mut self) -> io::Result<()> {
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

    pub(super) fn blocking_kill_and_remove(&mut self) -> io::Result<()> {
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
