//! Python zygotes made from a template process outside the executor's sandbox (`template.rs`,
//! `zygote.py`'s template role): the first Python execution is a fork of a prewarmed interpreter,
//! which carries the programs' isolation and nothing of the template. Needs root (the template
//! enters namespaces; the programs' user namespace maps host ids).

mod common;

use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::sync::Arc;

use common::*;
use sandbox_exec::{template, userns, Executor, ExecutorConfig};

// A range of its own, below the one of userns.rs and the manager's (2**28 on).
const BASE: u32 = (1 << 28) - (1 << 18);

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// A template process listening at a fresh path; killed and its socket removed on drop.
struct TemplateProcess {
    pid: i32,
    child: std::process::Child,
    path: PathBuf,
}

impl TemplateProcess {
    fn start() -> TemplateProcess {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = PathBuf::from(format!("/tmp/sbx-template-{}-{n}.sock", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let listener = listen(&path);
        // Its retirement pipe: the write end is ours (closed at our exit: it then ends).
        let mut pipe = [0; 2];
        // SAFETY: valid out-array.
        assert_eq!(
            unsafe { libc::pipe2(pipe.as_mut_ptr(), libc::O_CLOEXEC) },
            0
        );
        let retire_r = pipe[0];
        let argv = template::command(PYTHON, "", 3, 4);
        let fd = listener.as_raw_fd();
        let mut cmd = std::process::Command::new(&argv[0]);
        cmd.args(&argv[1..]).env_clear();
        // SAFETY: dup2 is async-signal-safe.
        unsafe {
            cmd.pre_exec(move || {
                if libc::dup2(fd, 3) != 3 || libc::dup2(retire_r, 4) != 4 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        cmd.stdout(std::process::Stdio::piped());
        let mut child = cmd.spawn().expect("template");
        // SAFETY: our copy of the read end, no longer needed.
        unsafe { libc::close(retire_r) };
        let mut ready = [0u8; 6];
        std::io::Read::read_exact(child.stdout.as_mut().unwrap(), &mut ready).expect("ready");
        assert_eq!(&ready, b"ready\n");
        TemplateProcess {
            pid: child.id() as i32,
            child,
            path,
        }
    }

    fn executor(&self, seccomp: bool) -> Executor {
        let ns = userns::create(BASE).expect("user namespace");
        let ex = Executor::new(ExecutorConfig {
            uid: Some(65534),
            gid: Some(65534),
            seccomp,
            user_namespace: Some(Arc::new(ns)),
            ..config()
        })
        .expect("executor");
        assert!(ex.enable_python_zygote(PathBuf::from(PYTHON), false, ""));
        let conn = template::connect(&self.path).expect("connect");
        assert!(ex.enable_python_template(conn).expect("template"));
        ex
    }
}

impl Drop for TemplateProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        // The executor's reaper may have reaped it first (its zygotes' orphans are its to reap).
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.path);
    }
}

fn listen(path: &std::path::Path) -> std::os::fd::OwnedFd {
    use std::os::fd::FromRawFd;
    use std::os::unix::ffi::OsStrExt;
    // SAFETY: plain syscalls on a socket we own; `addr` is a valid sockaddr_un.
    unsafe {
        let fd = libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0);
        let mut addr: libc::sockaddr_un = std::mem::zeroed();
        addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
        for (d, s) in addr.sun_path.iter_mut().zip(path.as_os_str().as_bytes()) {
            *d = *s as libc::c_char;
        }
        let len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
        assert_eq!(
            libc::bind(fd, (&addr as *const libc::sockaddr_un).cast(), len),
            0
        );
        assert_eq!(libc::listen(fd, 16), 0);
        std::os::fd::OwnedFd::from_raw_fd(fd)
    }
}

fn status(pid: u32, field: &str) -> String {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_default()
        .trim()
        .to_string()
}

const REPORT: &str = "import os, random\n\
st = dict(l.split(':', 1) for l in open('/proc/self/status').read().splitlines())\n\
print(os.getuid(), os.getgid(), st['CapEff'].strip(), st['NoNewPrivs'].strip(), st['Seccomp'].strip())\n\
print(sorted(os.listdir('/proc/self/fd')))\n\
print(random.random(), os.urandom(8).hex())";

#[tokio::test]
async fn zygotes_made_from_a_template_carry_the_programs_isolation_and_nothing_of_the_template() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let tp = TemplateProcess::start();
    let ex = tp.executor(true);
    // The first execution: a process the template made, which ran it in place of serving.
    let first = run(&ex, py(REPORT)).await;
    assert!(
        first.zygote,
        "the template made the first execution: {first:?}"
    );
    assert!(ex.zygote_pid().is_none(), "it ran in place: no zygote yet");
    // The second: a worker of the zygote the template made.
    let o = run(&ex, py(REPORT)).await;
    assert!(o.zygote, "the second execution forks the zygote: {o:?}");
    let out = text(&o.stdout);
    let lines: Vec<&str> = out.lines().collect();
    // The programs' ids, no capability, no_new_privs, the filter; stdio only: both ways alike.
    assert_eq!(
        lines[0],
        "65534 65534 0000000000000000 1 2",
        "{out}{}",
        text(&o.stderr)
    );
    assert_eq!(lines[1], "['0', '1', '2', '3']", "{out}");
    let first_out = text(&first.stdout);
    assert_eq!(first_out.lines().take(2).collect::<Vec<_>>(), lines[..2]);
    assert_ne!(
        first_out.lines().nth(2),
        lines.get(2).copied(),
        "random streams of their own"
    );

    // The zygote: this process's child, in its namespaces but the programs' user namespace,
    // under the programs' isolation, holding its stdio and control socket only.
    let z = ex.zygote_pid().expect("zygote up");
    assert_ne!(z as i32, tp.pid);
    let stat = std::fs::read_to_string(format!("/proc/{z}/stat")).unwrap();
    let ppid: u32 = stat[stat.rfind(')').unwrap() + 2..]
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(ppid, std::process::id());
    let host_uid = (BASE + 65534).to_string();
    assert!(
        status(z, "Uid").starts_with(&host_uid),
        "{}",
        status(z, "Uid")
    );
    assert_eq!(status(z, "CapEff"), "0000000000000000");
    assert_eq!(status(z, "NoNewPrivs"), "1");
    assert_eq!(status(z, "Seccomp"), "2");
    let mut fds: Vec<String> = std::fs::read_dir(format!("/proc/{z}/fd"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    fds.sort();
    assert_eq!(fds, ["0", "1", "2", "3"]);
    let ns =
        |pid: String, kind: &str| std::fs::read_link(format!("/proc/{pid}/ns/{kind}")).unwrap();
    for kind in ["net", "ipc", "uts", "pid", "mnt", "cgroup"] {
        assert_eq!(ns(z.to_string(), kind), ns("self".into(), kind), "{kind}");
    }
    assert_ne!(ns(z.to_string(), "user"), ns("self".into(), "user"));

    // The template itself stays host root, apart from every executor.
    assert_eq!(
        status(tp.pid as u32, "Uid").split_whitespace().next(),
        Some("0")
    );
    drop(ex);

    // Another executor's zygote from the same template (one executor with a user namespace per
    // process at a time): random streams of its own.
    let other = tp.executor(true);
    let o2 = run(&other, py(REPORT)).await;
    assert!(o2.zygote);
    let a = out.lines().nth(2).unwrap().to_string();
    let b = text(&o2.stdout).lines().nth(2).unwrap().to_string();
    assert_ne!(a, b);
    drop(other);

    // A first execution made in place wears the Landlock ruleset it is sent, like a worker:
    // writes beneath its directory only.
    if sandbox_exec::landlock::abi() > 0 {
        let ex = tp.executor(true);
        let root = temp_dir("template-landlock");
        let inside = root.join("inside");
        std::fs::create_dir(&inside).unwrap();
        // SAFETY: plain syscall on a path we made.
        let path = std::ffi::CString::new(inside.to_str().unwrap()).unwrap();
        assert_eq!(
            unsafe { libc::chown(path.as_ptr(), BASE + 65534, BASE + 65534) },
            0
        );
        // Writable by the programs' user but for the ruleset.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o777)).unwrap();
        let outside = root.join("outside.txt");
        let code = format!(
            "open('here.txt', 'w').write('x')\n\
             try:\n    open({outside:?}, 'w')\nexcept PermissionError:\n    print('refused')\n",
            outside = outside.display().to_string()
        );
        let mut c = py(&code);
        c.cwd = Some(inside.clone());
        c.write_within = Some(inside.clone());
        let o = run(&ex, c).await;
        assert!(
            o.zygote && ex.zygote_pid().is_none(),
            "made in place: {o:?}"
        );
        assert_eq!(text(&o.stdout), "refused\n", "{}", text(&o.stderr));
        assert!(inside.join("here.txt").exists());
        assert!(!outside.exists());
        drop(ex);
        std::fs::remove_dir_all(&root).unwrap();
    }

    // Without its template, an executor spawns its zygote as before.
    let last = tp.executor(false);
    drop(tp);
    let o = run(&last, py("print(6 * 7)")).await;
    assert_eq!(text(&o.stdout), "42\n", "{}", text(&o.stderr));
}
