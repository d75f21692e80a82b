//! Pooled exec cgroups (`Executor::enable_cgroup_pool`, cgroup v1): reuse must be invisible to
//! programs: each exec alone in its cgroup, with its own limits, and counters that start afresh.
//! A binary of its own with a single test, because it counts this process's exec cgroups.

mod common;

use std::sync::Arc;

use common::*;
use sandbox_exec::Executor;

/// The exec cgroup a program ran in, from its own /proc/self/cgroup (pids hierarchy).
async fn own_cgroup(ex: &Executor) -> String {
    let o = run(ex, cmd(&["cat", "/proc/self/cgroup"])).await;
    cgroup_name(&text(&o.stdout))
}

fn cgroup_name(proc_self_cgroup: &str) -> String {
    proc_self_cgroup
        .lines()
        .find(|l| l.contains(":pids:"))
        .and_then(|l| l.rsplit('/').next())
        .unwrap_or_default()
        .to_string()
}

/// Exec cgroups of this process now, by name (one directory per hierarchy each).
fn cgroup_count(ex: &Executor) -> usize {
    let mut names: Vec<_> = leftover_cgroups(ex)
        .iter()
        .filter_map(|p| p.file_name().map(|n| n.to_owned()))
        .collect();
    names.sort();
    names.dedup();
    names.len()
}

/// Waits until the pool is back to `idle` cgroups (the one of the last exec returned).
async fn back_in_pool(ex: &Executor, idle: usize) {
    eventually("the cgroup is back in the pool", || {
        ex.idle_cgroups() >= idle
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pooled_cgroups() {
    if executor().capabilities().cgroup_version != "v1" {
        eprintln!("skipped: cgroup pooling needs cgroup v1");
        return;
    }
    counters_start_afresh().await;
    limits_follow_each_request().await;
    dirty_cgroups_are_not_reused().await;
    concurrent_execs_get_cgroups_of_their_own().await;
    dropping_the_executor_removes_idle_cgroups().await;
}

async fn counters_start_afresh() {
    let ex = executor();
    // The exec cgroup made to find the hierarchies writable is the pool's first, not made again.
    assert_eq!(cgroup_count(&ex), 1, "the probe's exec cgroup");
    ex.enable_cgroup_pool(2);
    assert_eq!(ex.idle_cgroups(), 1, "one created ahead of demand");
    assert_eq!(cgroup_count(&ex), 1, "the probe's, adopted");
    let first = own_cgroup(&ex).await;
    assert!(first.starts_with("exec-"), "{first}");
    back_in_pool(&ex, 1).await;
    assert_eq!(own_cgroup(&ex).await, first, "reused");
    back_in_pool(&ex, 1).await;

    // CPU: a busy exec, then a trivial one in the same cgroup.
    let busy = run(
        &ex,
        py("import time\nend = time.time() + 0.3\nwhile time.time() < end: pass"),
    )
    .await;
    back_in_pool(&ex, 1).await;
    let idle = run(&ex, cmd(&["/bin/true"])).await;
    assert!(idle.cpu_time < busy.cpu_time / 4, "{busy:?}\n{idle:?}");

    // Peak memory: a big allocation, then a small program.
    let o = run(&ex, py("b = bytearray(96 << 20)")).await;
    assert_eq!(o.exit_code, Some(0), "{o:?}");
    assert!(o.peak_memory_bytes >= 96 << 20, "{}", o.peak_memory_bytes);
    back_in_pool(&ex, 1).await;
    let o = run(&ex, cmd(&["/bin/true"])).await;
    assert!(o.peak_memory_bytes < 32 << 20, "{}", o.peak_memory_bytes);

    // Sequential execs keep reusing what the pool has.
    for _ in 0..10 {
        run(&ex, cmd(&["/bin/true"])).await;
    }
    eventually("at most max_idle cgroups", || cgroup_count(&ex) <= 2).await;
    ex.kill_all();
    eventually("kill_all removes idle cgroups", || {
        leftover_cgroups(&ex).is_empty()
    })
    .await;
}

async fn limits_follow_each_request() {
    let ex = executor();
    ex.enable_cgroup_pool(1);
    // Raised and lowered on a reused cgroup, then a fresh one after the oom kill.
    let alloc = "b = bytearray(48 << 20); print('ok')";
    for (memory, survives) in [
        (256 << 20, true),
        (1 << 30, true),
        (128 << 20, true),
        (32 << 20, false),
        (256 << 20, true),
    ] {
        let mut c = py(alloc);
        c.limits.memory_bytes = memory;
        let o = run(&ex, c).await;
        assert_eq!(o.exit_code == Some(0), survives, "limit {memory}: {o:?}");
        assert_eq!(o.oom_killed, !survives, "limit {memory}: {o:?}");
        if survives {
            back_in_pool(&ex, 1).await;
        }
    }
    // A low pids limit does not stay behind for the next exec.
    let mut c = cmd(&["/bin/true"]);
    c.limits.max_pids = 2;
    run(&ex, c).await;
    back_in_pool(&ex, 1).await;
    let o = run(
        &ex,
        sh("for i in 1 2 3 4 5 6 7 8; do sleep 0.1 & done; wait"),
    )
    .await;
    assert_eq!(o.exit_code, Some(0), "{o:?}");
    assert!(!o.pids_limited, "{o:?}");
    // Nor do the events of an exec that hit it.
    let mut c = sh("for i in 1 2 3 4 5 6 7 8; do sleep 1 & done; wait");
    c.limits.max_pids = 4;
    assert!(run(&ex, c).await.pids_limited);
    let o = run(&ex, cmd(&["/bin/true"])).await;
    assert!(!o.pids_limited && !o.oom_killed, "{o:?}");
    ex.kill_all();
}

async fn dirty_cgroups_are_not_reused() {
    let ex = executor();
    ex.enable_cgroup_pool(1);
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir() {
        // tmpfs pages stay charged to the cgroup that wrote them, after the writer exits.
        let file = shm.join(format!("sandbox-exec-pool-test-{}", std::process::id()));
        let o = run(
            &ex,
            sh(&format!(
                "cat /proc/self/cgroup; dd if=/dev/zero of={} bs=1M count=8 2>/dev/null",
                file.display()
            )),
        )
        .await;
        assert_eq!(o.exit_code, Some(0), "{o:?}");
        let charged = cgroup_name(&text(&o.stdout));
        let next = own_cgroup(&ex).await;
        assert_ne!(
            charged, next,
            "a cgroup still charged with 8 MiB was reused"
        );
        let _ = std::fs::remove_file(&file);
    }
    // A background process outliving the program is killed with the exec, pool or not.
    let o = run(&ex, sh("sleep 1000 & echo $!")).await;
    let bg: i32 = text(&o.stdout).trim().parse().unwrap();
    eventually("background sleep is gone", || gone(bg)).await;
    let o = run(&ex, cmd(&["/bin/true"])).await;
    assert_eq!(o.exit_code, Some(0));
    ex.kill_all();
}

async fn concurrent_execs_get_cgroups_of_their_own() {
    let ex = Arc::new(executor());
    ex.enable_cgroup_pool(2);
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let ex = ex.clone();
            tokio::spawn(async move {
                let o = run(&ex, sh("cat /proc/self/cgroup; sleep 0.3")).await;
                cgroup_name(&text(&o.stdout))
            })
        })
        .collect();
    let mut seen = Vec::new();
    for t in tasks {
        seen.push(t.await.unwrap());
    }
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 4, "{seen:?}");
    eventually("all execs finished", || ex.running() == 0).await;
    eventually("at most max_idle cgroups", || cgroup_count(&ex) <= 2).await;
    ex.kill_all();
}

async fn dropping_the_executor_removes_idle_cgroups() {
    let ex = executor();
    ex.enable_cgroup_pool(3);
    for _ in 0..3 {
        run(&ex, cmd(&["/bin/true"])).await;
    }
    eventually("all execs finished", || ex.running() == 0).await;
    let parents = ex.cgroup_parents();
    drop(ex);
    let prefix = format!("exec-{}-", std::process::id());
    eventually("no exec cgroups left", || {
        parents
            .iter()
            .flat_map(|p| std::fs::read_dir(p).into_iter().flatten().flatten())
            .all(|e| !e.file_name().to_string_lossy().starts_with(&prefix))
    })
    .await;
}
