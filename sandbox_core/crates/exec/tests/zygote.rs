//! The Python fast path: executions forked from a prewarmed interpreter, with the isolation of
//! any exec.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use sandbox_exec::{Executor, ExecutorConfig};

fn with_zygote(config: ExecutorConfig) -> Executor {
    let ex = Executor::new(config).expect("executor");
    assert!(ex.enable_python_zygote(PathBuf::from(PYTHON), false, ""));
    ex
}

/// Runs Python until the zygote serves it: the execution that starts the zygote (and any while it
/// loads its modules) is spawned, with the same result.
async fn warm(ex: &Executor) {
    for _ in 0..200 {
        let o = run(ex, py("print(1)")).await;
        assert_eq!(text(&o.stdout), "1\n", "{}", text(&o.stderr));
        if o.zygote {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the zygote never became ready");
}

fn zygote_pids() -> Vec<i32> {
    let me = std::process::id().to_string();
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            let ppid = stat[stat.rfind(')')? + 1..]
                .split_whitespace()
                .nth(1)?
                .to_string();
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            (ppid == me && String::from_utf8_lossy(&cmdline).contains("The Python zygote"))
                .then_some(pid)
        })
        .collect()
}

#[tokio::test]
async fn runs_python_through_the_zygote() {
    let ex = with_zygote(config());
    assert!(!ex.zygote_running(), "started lazily");
    // The first execution is spawned and starts nothing: a sandbox that runs Python once never
    // pays for the zygote.
    let o = run(&ex, py("print(1)")).await;
    assert!(!o.zygote && !ex.zygote_running(), "{o:?}");
    assert_eq!(text(&o.stdout), "1\n");
    // The second starts it and is spawned too: nobody waits for the zygote.
    let o = run(&ex, py("print(1)")).await;
    assert!(!o.zygote && ex.zygote_running(), "{o:?}");
    assert_eq!(text(&o.stdout), "1\n");
    warm(&ex).await;
    let o = run(
        &ex,
        cmd(&[
            "python3",
            "-c",
            "import sys; print('hi', sys.argv[1:]); sys.exit(3)",
            "a",
            "b",
        ]),
    )
    .await;
    assert!(o.zygote, "{o:?}");
    assert_eq!(
        text(&o.stdout),
        "hi ['a', 'b']\n",
        "stderr: {}",
        text(&o.stderr)
    );
    assert_eq!(o.exit_code, Some(3));
    assert!(ex.zygote_running());
    // stdin, stderr, an uncaught exception.
    let o = ex
        .run(
            py("import sys; print(sys.stdin.read().upper()); raise ValueError('boom')"),
            Bytes::from("abc"),
        )
        .await
        .unwrap();
    assert!(o.zygote);
    assert_eq!(text(&o.stdout), "ABC\n");
    assert_eq!(
        text(&o.stderr),
        "Traceback (most recent call last):\n  File \"<string>\", line 1, in <module>\nValueError: boom\n"
    );
    assert_eq!(o.exit_code, Some(1));
    // A file with arguments, relative to the cwd; __name__, __file__ and sys.path[0] as python3.
    let dir = temp_dir("zyg-file");
    std::fs::write(
        dir.join("m.py"),
        "import sys\nprint(__name__, __file__, sys.argv, sys.path[0])\n",
    )
    .unwrap();
    let mut c = cmd(&["/usr/bin/python3", "-u", "m.py", "x"]);
    c.cwd = Some(dir.clone());
    let o = run(&ex, c).await;
    assert!(o.zygote);
    assert_eq!(
        text(&o.stdout),
        format!("__main__ m.py ['m.py', 'x'] {}\n", dir.display()),
        "{}",
        text(&o.stderr)
    );
    std::fs::remove_dir_all(dir).unwrap();
    // Only stdio is inherited; env is the exec's.
    let mut c = py("import os\nprint([fd for fd in range(3, 1024) if os.path.exists(f'/proc/self/fd/{fd}')], os.environ.get('K'), os.getpgrp() == os.getpid() == os.getsid(0))");
    c.env.insert("K".into(), "v".into());
    let o = run(&ex, c).await;
    assert!(o.zygote);
    assert_eq!(text(&o.stdout), "[] v True\n", "{}", text(&o.stderr));
    // Not the fast path: other programs, other shapes.
    assert!(!run(&ex, sh("true")).await.zygote);
    assert!(
        !run(&ex, cmd(&["python3", "-m", "json.tool", "/dev/null"]))
            .await
            .zygote
    );
    let mut c = cmd(&["python3", "-c", "pass"]);
    c.env.insert("PYTHONPATH".into(), "/x".into());
    assert!(!run(&ex, c).await.zygote);
}

/// A worker's environment is the exec's, whatever it adds to, changes in or (`clear_env`) drops of
/// the zygote's, exactly as a spawned interpreter's (which adds what its start adds, such as the
/// locale coercion's `LC_CTYPE`).
#[tokio::test]
async fn the_environment_is_the_execs_own() {
    let mut conf = config();
    conf.base_env.insert("A".into(), "base".into());
    conf.base_env.insert("B".into(), "base".into());
    let ex = with_zygote(conf.clone());
    let spawned = Executor::new(conf).expect("executor");
    warm(&ex).await;
    let show = "import os\nprint(sorted(os.environ.items()))";
    let mut changed = py(show);
    changed.env.insert("A".into(), "x".into());
    changed.env.insert("C".into(), "y".into());
    let mut cleared = changed.clone();
    cleared.clear_env = true;
    cleared.env.insert("PATH".into(), "/usr/bin:/bin".into());
    for (c, want, gone) in [
        (
            py(show),
            &["('A', 'base')", "('B', 'base')"][..],
            &["'C'"][..],
        ),
        (
            changed,
            &["('A', 'x')", "('B', 'base')", "('C', 'y')"][..],
            &[][..],
        ),
        (
            cleared,
            &["('A', 'x')", "('C', 'y')", "('PATH', '/usr/bin:/bin')"][..],
            &["'B'"][..],
        ),
    ] {
        let o = run(&spawned, c.clone()).await;
        assert!(!o.zygote);
        let expect = text(&o.stdout);
        assert!(want.iter().all(|w| expect.contains(w)), "{expect}");
        assert!(!gone.iter().any(|g| expect.contains(g)), "{expect}");
        for _ in 0..2 {
            let o = run(&ex, c.clone()).await;
            assert!(o.zygote, "{o:?}");
            assert_eq!(text(&o.stdout), expect, "{}", text(&o.stderr));
        }
    }
}

#[tokio::test]
async fn forks_are_isolated() {
    let ex = with_zygote(ExecutorConfig {
        uid: Some(65534),
        gid: Some(65534),
        ..config()
    });
    warm(&ex).await;
    let o = run(
        &ex,
        py("import os; print(os.getuid(), os.getgid(), os.getgroups())"),
    )
    .await;
    assert!(o.zygote);
    assert_eq!(
        text(&o.stdout),
        "65534 65534 [65534]\n",
        "{}",
        text(&o.stderr)
    );
    // seccomp and no_new_privs.
    let o = run(&ex, py("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nprint(ctypes.get_errno() if libc.unshare(0x10000000) == -1 else 0)\nprint(open('/proc/self/status').read().split('NoNewPrivs:')[1].split()[0])")).await;
    assert!(o.zygote);
    assert_eq!(
        text(&o.stdout),
        format!("{}\n1\n", libc::EPERM),
        "{}",
        text(&o.stderr)
    );
    // rlimits of this exec.
    let mut c = py("import resource as r; print(r.getrlimit(r.RLIMIT_NOFILE), r.getrlimit(r.RLIMIT_CPU), r.getrlimit(r.RLIMIT_CORE))");
    c.limits.max_open_files = 77;
    c.limits.cpu_time = Duration::from_secs(3);
    let o = run(&ex, c).await;
    assert!(o.zygote);
    assert_eq!(
        text(&o.stdout),
        "(77, 77) (3, 4) (0, 0)\n",
        "{}",
        text(&o.stderr)
    );
    // Global and module state does not leak from one execution to the next.
    let o = run(&ex, py("import json, sys\njson.leak = 1\nsys.modules['leaky'] = json\nglobal_x = 5\nopen('/proc/self/comm')")).await;
    assert_eq!(o.exit_code, Some(0), "{}", text(&o.stderr));
    let o = run(&ex, py("import json, sys\nprint(hasattr(json, 'leak'), 'leaky' in sys.modules, 'global_x' in globals())")).await;
    assert!(o.zygote);
    assert_eq!(
        text(&o.stdout),
        "False False False\n",
        "{}",
        text(&o.stderr)
    );
}

#[tokio::test]
async fn limits_apply_to_forks() {
    let ex = with_zygote(config());
    warm(&ex).await;
    // Timeout kills the whole tree, background child included.
    let dir = temp_dir("zyg-bg");
    let marker = dir.join("alive");
    let code = format!(
        "import subprocess, time\nsubprocess.Popen(['sh', '-c', 'sleep 2; touch {}'], start_new_session=True)\ntime.sleep(100)",
        marker.display()
    );
    let mut c = py(&code);
    c.limits.wall_time = Duration::from_millis(700);
    let o = run(&ex, c).await;
    assert!(o.zygote && o.timed_out, "{o:?}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!marker.exists(), "the background child survived");
    std::fs::remove_dir_all(dir).unwrap();
    // Memory limit: an oom kill in the exec's own cgroup; the zygote lives on.
    if ex.capabilities().cgroup_version != "none" {
        let mut c = py("b = bytearray(1 << 30)");
        c.limits.memory_bytes = 64 << 20;
        let o = run(&ex, c).await;
        assert!(o.zygote && o.oom_killed, "{o:?}");
        let o = run(&ex, py("print(1)")).await;
        assert!(o.zygote);
        assert_eq!(text(&o.stdout), "1\n");
    }
    // CPU limit.
    let mut c = py("while True: pass");
    c.limits.cpu_time = Duration::from_secs(1);
    let o = run(&ex, c).await;
    assert!(o.zygote && o.cpu_limited, "{o:?}");
}

#[tokio::test]
async fn a_dead_zygote_is_restarted() {
    let ex = with_zygote(config());
    warm(&ex).await;
    let pid = ex.zygote_pid().unwrap() as i32;
    assert!(zygote_pids().contains(&pid));
    // SAFETY: plain syscall on our own child.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    eventually("zygote seen dead", || !ex.zygote_running()).await;
    warm(&ex).await;
    let o = run(&ex, py("print(2)")).await;
    assert!(o.zygote);
    assert_eq!(text(&o.stdout), "2\n");
    let now = ex.zygote_pid().unwrap() as i32;
    assert_ne!(now, pid);
    assert!(zygote_pids().contains(&now));
    // kill_all stops it; it comes back on demand.
    ex.kill_all();
    assert!(!ex.zygote_running());
    warm(&ex).await;
    let last = ex.zygote_pid().unwrap() as i32;
    drop(ex);
    eventually("zygote gone with its executor", || {
        !zygote_pids().contains(&last)
    })
    .await;
}

#[tokio::test]
async fn falls_back_to_spawn_without_a_zygote() {
    // No interpreter there: not enabled, Python is spawned.
    let ex = Executor::new(config()).unwrap();
    assert!(!ex.enable_python_zygote(PathBuf::from("/nonexistent/python3"), false, ""));
    let o = run(&ex, py("print(1)")).await;
    assert!(!o.zygote);
    assert_eq!(text(&o.stdout), "1\n");
    // An "interpreter" that cannot run the zygote: every attempt fails, the exec is spawned.
    let dir = temp_dir("zyg-fake");
    let fake = dir.join("python3");
    std::os::unix::fs::symlink("/bin/sh", &fake).unwrap();
    let ex = Executor::new(config()).unwrap();
    assert!(ex.enable_python_zygote(fake.clone(), false, ""));
    let o = run(&ex, cmd(&[fake.to_str().unwrap(), "-c", "echo spawned"])).await;
    assert!(!o.zygote);
    assert_eq!(text(&o.stdout), "spawned\n");
    std::fs::remove_dir_all(dir).unwrap();
}

/// `write_within` confines a program's writes to one directory (Landlock), on both paths: a
/// zygote worker enforces the ruleset it is sent, a spawned program enforces it before exec.
/// Reads, `/dev/null` and its own stdio reopened by name stay allowed.
#[tokio::test]
async fn write_within_confines_writes_on_both_paths() {
    if sandbox_exec::landlock::abi() == 0 {
        eprintln!("skipped: no Landlock in this kernel");
        return;
    }
    let ex = with_zygote(config());
    warm(&ex).await;
    let root = temp_dir("landlock");
    let inside = root.join("inside");
    std::fs::create_dir(&inside).unwrap();
    let outside = root.join("outside.txt");
    let code = format!(
        "import os\n\
         open('here.txt', 'w').write('x')\n\
         open('/dev/null', 'w').write('x')\n\
         open('/dev/stdout', 'w').write('reopened\\n')\n\
         try:\n    open({outside:?}, 'w')\nexcept PermissionError:\n    print('refused')\n",
        outside = outside.display().to_string()
    );
    let confined = |argv: &[&str]| {
        let mut c = cmd(argv);
        c.cwd = Some(inside.clone());
        c.write_within = Some(inside.clone());
        c
    };
    let o = run(&ex, confined(&[PYTHON, "-I", "-c", &code])).await;
    assert!(o.zygote);
    assert_eq!(
        text(&o.stdout),
        "reopened\nrefused\n",
        "{}",
        text(&o.stderr)
    );
    let o = run(
        &ex,
        confined(&["/bin/sh", "-c", &format!("echo x > {}", outside.display())]),
    )
    .await;
    assert!(!o.zygote);
    assert_ne!(o.exit_code, Some(0), "{}", text(&o.stderr));
    assert!(!outside.exists());
    assert!(inside.join("here.txt").exists());
    // Unconfined, the same write goes through.
    let o = run(&ex, sh(&format!("echo x > {}", outside.display()))).await;
    assert_eq!(o.exit_code, Some(0), "{}", text(&o.stderr));
    std::fs::remove_dir_all(&root).unwrap();
}

/// A command with a `zygote_entry` calls the prelude's function through the zygote (with the
/// arguments after the file, `__main__` a fresh module named after it) and runs the file itself
/// when spawned.
#[tokio::test]
async fn an_entry_calls_the_prelude_through_the_zygote_and_the_file_when_spawned() {
    const PRELUDE: &str = "import sys\n\ndef greet(who):\n    import __main__\n    print('prelude', who, sys.argv[0].rsplit('/', 1)[-1], __main__.__file__.rsplit('/', 1)[-1])\n";
    let dir = temp_dir("zyg-entry");
    let file = dir.join("greet.py");
    std::fs::write(&file, "import sys\nprint('file', sys.argv[1])\n").unwrap();
    let command = || {
        let mut c = cmd(&[PYTHON, "-I", file.to_str().unwrap(), "you"]);
        c.zygote_entry = Some("greet");
        c
    };
    let spawned = run(&executor(), command()).await;
    assert_eq!(
        text(&spawned.stdout),
        "file you\n",
        "{}",
        text(&spawned.stderr)
    );
    let ex = Executor::new(config()).expect("executor");
    assert!(ex.enable_python_zygote(PathBuf::from(PYTHON), false, PRELUDE));
    warm(&ex).await;
    let forked = run(&ex, command()).await;
    assert!(forked.zygote, "{forked:?}");
    assert_eq!(
        text(&forked.stdout),
        "prelude you greet.py greet.py\n",
        "{}",
        text(&forked.stderr)
    );
    // Without an entry the same file runs as itself through the zygote.
    let plain = run(&ex, cmd(&[PYTHON, "-I", file.to_str().unwrap(), "me"])).await;
    assert!(plain.zygote);
    assert_eq!(text(&plain.stdout), "file me\n");
    let _ = std::fs::remove_dir_all(&dir);
}
