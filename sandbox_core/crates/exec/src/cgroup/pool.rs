//! Idle v1 exec cgroups kept for reuse (`Pool`).

use super::*;

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
    pub(super) cgroups: Cgroups,
    pub(super) idle: Mutex<Vec<Slot>>,
    pub(super) max_idle: usize,
    /// Set by `drain`, cleared by the next `take`: cgroups of execs that end meanwhile are removed.
    pub(super) drained: AtomicBool,
}

/// Memory a cgroup may still have charged (kernel objects, page cache of files its programs wrote)
/// and be reused; above it the cgroup is removed and the charge leaves with it.
pub(super) const REUSE_MAX_CHARGE: u64 = 1 << 20;

pub(super) static POOL_COUNTER: AtomicU64 = AtomicU64::new(0);

impl Pool {
    /// A pool keeping up to `max_idle` idle cgroups, `prefill` of them ready now: the first is the
    /// cgroup the hierarchies were probed with, where it is still there, the others created now.
    /// `None` where pooling does not apply (cgroup v2, `max_idle` 0).
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
        let mut prefill = prefill.min(max_idle);
        if let Some(name) = prefill
            .checked_sub(1)
            .and(cgroups.probed.as_ref())
            .and_then(|p| p.adopt())
        {
            match cgroups.adopt_slot(name) {
                Ok(slot) => {
                    pool.lock().push(slot);
                    prefill -= 1;
                }
                Err(e) => tracing::warn!(error = %e, "cannot adopt the probe's exec cgroup"),
            }
        }
        for _ in 0..prefill {
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

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Slot>> {
        self.idle.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new cgroup under a name nobody uses: unlike a per-exec cgroup it never takes over an
    /// existing directory, which could be an idle cgroup of another executor sharing the parent.
    pub(super) fn fresh(&self) -> Result<Slot, SpawnError> {
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

    pub(super) fn put(&self, slot: Slot) {
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
