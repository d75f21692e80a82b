//! Nothing is left behind: no exec cgroups, no zombies. A binary of its own, so no other test of
//! this process runs concurrently and "none of ours" is a meaningful check.

mod common;

use std::time::Duration;

use common::*;
use sandbox_exec::SpawnError;

fn zombie_children() -> Vec<i32> {
    let me = std::process::id().to_string();
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            let rest = &stat[stat.rfind(')')? + 1..];
            let mut f = rest.split_whitespace();
            let (state, ppid) = (f.next()?, f.next()?);
            (state == "Z" && ppid == me)
                .then(|| e.file_name().to_string_lossy().parse().ok())
                .flatten()
        })
        .collect()
}

#[tokio::test]
async fn leaves_no_cgroups_and_no_zombies() {
    let ex = executor();
    if ex.capabilities().cgroup_version != "none" {
        assert!(!ex.cgroup_parents().is_empty());
    }
    let _ = run(&ex, sh("echo hi; sleep 1000 & setsid sleep 1000 &")).await;
    let mut c = sh("setsid sleep 1000 & sleep 1000");
    c.limits.wall_time = Duration::from_millis(500);
    assert!(run(&ex, c).await.timed_out);
    let mut c = py("b = b'x' * (1 << 30)");
    c.limits.memory_bytes = 32 << 20;
    let _ = run(&ex, c).await;
    let mut c = cmd(&["/bin/true"]);
    c.cwd = Some("/nonexistent".into());
    assert!(matches!(ex.start(c), Err(SpawnError::Isolation { .. })));
    let mut c = sh("f() { f | f & }; f; sleep 1000");
    c.limits.max_pids = 16;
    c.limits.wall_time = Duration::from_secs(1);
    let _ = run(&ex, c).await;
    let r = ex.start(sh("sleep 1000 & sleep 1000")).unwrap();
    drop(r);
    eventually("all execs finished", || ex.running() == 0).await;
    eventually("no exec cgroups left", || leftover_cgroups(&ex).is_empty()).await;
    eventually("no zombies left", || zombie_children().is_empty()).await;
}
