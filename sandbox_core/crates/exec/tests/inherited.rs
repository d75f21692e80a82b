//! What a program inherits from the way it is started: exactly one seccomp filter (whether it was
//! attached in the child or inherited from the spawner thread), `no_new_privs`, the CPUs of the
//! thread that started it (children are cloned pinned to one CPU and given those back), and no
//! seccomp filter or pinning left on the caller.

mod common;

use common::*;
use sandbox_exec::ExecutorConfig;

fn field(status: &str, name: &str) -> Option<String> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(|v| v.trim().to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_filter_no_new_privs_and_all_cpus() {
    let own = std::fs::read_to_string("/proc/thread-self/status").unwrap();
    for seccomp in [true, false] {
        let ex = sandbox_exec::Executor::new(ExecutorConfig {
            seccomp,
            ..config()
        })
        .unwrap();
        for _ in 0..3 {
            let o = run(&ex, cmd(&["cat", "/proc/self/status"])).await;
            let status = text(&o.stdout);
            let want = if seccomp { "2" } else { "0" };
            assert_eq!(field(&status, "Seccomp").as_deref(), Some(want), "{status}");
            if let Some(n) = field(&status, "Seccomp_filters") {
                assert_eq!(n, if seccomp { "1" } else { "0" }, "{status}");
            }
            assert_eq!(field(&status, "NoNewPrivs").as_deref(), Some("1"));
            assert_eq!(
                field(&status, "Cpus_allowed_list"),
                field(&own, "Cpus_allowed_list"),
                "{status}"
            );
        }
    }
    // The test's own threads are left as they were.
    let after = std::fs::read_to_string("/proc/thread-self/status").unwrap();
    for f in ["Seccomp", "NoNewPrivs", "Cpus_allowed_list"] {
        assert_eq!(field(&after, f), field(&own, f), "{f}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_short_execs_all_get_their_status() {
    // Children exit while other spawns are still registering theirs: no status may be lost to
    // the reaper (see `reaper`), whichever of the two reaps each one.
    let ex = std::sync::Arc::new(executor());
    let tasks: Vec<_> = (0..4)
        .map(|t| {
            let ex = ex.clone();
            tokio::spawn(async move {
                for i in 0..40 {
                    let code = (t * 40 + i) % 7;
                    let o = run(&ex, sh(&format!("exit {code}"))).await;
                    assert_eq!(o.exit_code, Some(code), "{o:?}");
                    let o = run(&ex, sh("true & exit 0")).await;
                    assert_eq!(o.exit_code, Some(0), "{o:?}");
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    eventually("all execs finished", || ex.running() == 0).await;
}
