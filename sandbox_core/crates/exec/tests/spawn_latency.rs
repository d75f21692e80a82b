//! Sequential start-to-exit latency of `/bin/true`, with and without cgroups. A measurement, not a
//! check: `cargo test --release -p sandbox-exec --test spawn_latency -- --ignored --nocapture`.

mod common;

use std::time::{Duration, Instant};

use common::*;
use sandbox_exec::{Event, Executor, ExecutorConfig};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measurement; run explicitly"]
async fn spawn_latency() {
    for (name, use_cgroups, pool) in [
        ("cgroups", true, 0),
        ("cgroups, pooled (as in the agent)", true, 2),
        ("no cgroups", false, 0),
    ] {
        let ex = Executor::new(ExecutorConfig {
            use_cgroups,
            ..config()
        })
        .unwrap();
        ex.enable_cgroup_pool(pool);
        for _ in 0..20 {
            run(&ex, cmd(&["/bin/true"])).await;
        }
        let n = 200;
        let (mut start, t) = (Duration::ZERO, Instant::now());
        for _ in 0..n {
            let t0 = Instant::now();
            let mut r = ex.start(cmd(&["/bin/true"])).unwrap();
            start += t0.elapsed();
            while let Some(e) = r.events.recv().await {
                if let Event::Exit(_) = e {
                    break;
                }
            }
        }
        eprintln!(
            "{name}: {:?} per exec, of which start() {:?}",
            t.elapsed() / n,
            start / n
        );
    }
}
