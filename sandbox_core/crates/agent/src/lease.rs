//! The owner's lease: when it is not renewed in time, the agent kills everything it started and
//! exits, so a crashed manager leaves no orphans behind.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

pub struct Lease {
    deadline: Mutex<Option<Instant>>,
    changed: Notify,
}

/// Longest lease an owner may ask for; renewals beyond it are refused as invalid.
pub const MAX_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

impl Lease {
    /// `ttl` zero: no lease, the agent lives until killed.
    pub fn new(ttl: Duration) -> Arc<Self> {
        let deadline = (!ttl.is_zero()).then(|| Instant::now() + ttl);
        Arc::new(Lease {
            deadline: Mutex::new(deadline),
            changed: Notify::new(),
        })
    }

    pub fn renew(&self, ttl: Duration) -> Duration {
        *self.deadline.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now() + ttl);
        self.changed.notify_one();
        ttl
    }

    fn deadline(&self) -> Option<Instant> {
        *self.deadline.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Returns when the lease has lapsed (never, without a lease).
    pub async fn lapsed(&self) {
        loop {
            match self.deadline() {
                None => self.changed.notified().await,
                Some(d) if Instant::now() >= d => return,
                Some(d) => {
                    tokio::select! {
                        _ = tokio::time::sleep_until(d) => {}
                        _ = self.changed.notified() => {}
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn lapses_unless_renewed() {
        let lease = Lease::new(Duration::from_secs(10));
        let l2 = lease.clone();
        let waiter = tokio::spawn(async move {
            l2.lapsed().await;
            Instant::now()
        });
        let start = Instant::now();
        tokio::time::sleep(Duration::from_secs(8)).await;
        lease.renew(Duration::from_secs(10));
        let lapsed_at = waiter.await.unwrap();
        assert!(lapsed_at - start >= Duration::from_secs(18));
    }
}
