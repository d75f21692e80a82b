//! Helpers shared by the integration tests. They run real programs: Debian's /usr/bin/python3,
//! /bin/sh and coreutils.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use sandbox_exec::{Command, Executor, ExecutorConfig, Limits, Outcome};

pub const PYTHON: &str = "/usr/bin/python3";

pub fn config() -> ExecutorConfig {
    ExecutorConfig {
        uid: None,
        gid: None,
        seccomp: true,
        use_cgroups: true,
        cgroup_parent: None,
        work_dir: PathBuf::from("/tmp"),
        base_env: BTreeMap::from([(
            "PATH".to_string(),
            "/usr/local/bin:/usr/bin:/bin".to_string(),
        )]),
        default_limits: Limits::default(),
        user_namespace: None,
    }
}

pub fn executor() -> Executor {
    Executor::new(config()).expect("executor")
}

pub fn cmd(argv: &[&str]) -> Command {
    Command {
        argv: argv.iter().map(|s| s.to_string()).collect(),
        env: BTreeMap::new(),
        clear_env: false,
        cwd: None,
        limits: Limits::default(),
        write_within: None,
        keep_descendants: false,
        zygote_entry: None,
        terminal: None,
        account: None,
    }
}

pub fn sh(script: &str) -> Command {
    cmd(&["/bin/sh", "-c", script])
}

pub fn py(code: &str) -> Command {
    cmd(&[PYTHON, "-I", "-c", code])
}

pub async fn run(ex: &Executor, c: Command) -> Outcome {
    ex.run(c, bytes::Bytes::new()).await.expect("run")
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Whether `pid` is gone. A zombie counts as alive: it has not been reaped yet.
pub fn gone(pid: i32) -> bool {
    !Path::new(&format!("/proc/{pid}")).exists()
}

/// Polls a real condition, bounded; panics with `what` if it never holds.
pub async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    for _ in 0..400 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("condition never held: {what}");
}

/// A fresh directory under /tmp, removed by the caller.
pub fn temp_dir(tag: &str) -> PathBuf {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let d = std::env::temp_dir().join(format!(
        "sandbox-exec-test-{}-{tag}-{n}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

/// Exec cgroups of this test process still present under the executor's parents.
pub fn leftover_cgroups(ex: &Executor) -> Vec<PathBuf> {
    let prefix = format!("exec-{}-", std::process::id());
    ex.cgroup_parents()
        .iter()
        .flat_map(|p| std::fs::read_dir(p).into_iter().flatten().flatten())
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .collect()
}
