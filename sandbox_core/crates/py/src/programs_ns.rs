//! The user namespace of a sandbox that memory snapshots' programs are restored into
//! (`LaunchConfig.programs_pid_ns`), made by the launcher before the agent, and the sandbox's pid
//! namespace, owned by it, with an init of its own. Other sandboxes' agents make their programs'
//! user namespace themselves and are their pid namespace's init (`sandbox_exec::userns`).
//!
//! The agent stays in the host's user namespace; its programs run in one whose ids 0..65536 are
//! the host's `base..base+65536`. The sandbox's pid namespace belongs to that user namespace, not
//! the host's: a process restored from a memory snapshot forks its children and threads with
//! their dumped pids (`clone3`'s `set_tid`), which the kernel grants only with
//! CAP_CHECKPOINT_RESTORE over the pid namespace's owner, and a restored program runs in its user
//! namespace. A pid namespace's first process is its init, and it can only be made by a process
//! whose namespace for children it is, i.e. one of the owner user namespace (the kernel opens no
//! `pid_for_children` of a namespace without an init): so its init is a small process of the
//! programs' user namespace (`sandbox-agent --pid-ns-init`: it reaps and waits, holds no fd but
//! the read end of a pipe only the agent holds the other end of, and can be signalled by no
//! program), and the agent, cloned into the namespace once it has one, is its pid 2 and the
//! programs' subreaper. The init ends when the agent does (the pipe's end), and every process of
//! the namespace with it, as they do with an agent that is its init; killing the init (the
//! launcher's `kill`) kills them all, the agent included.
//!
//! What root inside gains over the pid namespace is its own: choosing its next pid (`set_tid`),
//! tracing the init (a process of its own user namespace, holding nothing). Signals, ptrace and
//! /proc of the agent are checked against the agent's credentials (the host's); `reboot` (which
//! would end the init) is refused by the seccomp filter, and `/proc/sys` is read-only (its
//! `ns_last_pid` and `pid_max` are the pid namespace's owner's to write).
//!
//! A helper cloned like the launcher's child (`CLONE_VM`, raw system calls only: see
//! `launch_child`) joins the sandbox's cgroups (v1), takes the sandbox's root id `base` (so the
//! namespace's owner, whom the kernel charges the sandbox's per-user counts to at every level up,
//! is the sandbox's own id), unshares the user and pid namespaces in one call (the pid
//! namespace's owner is the new user namespace) and says so; the launcher writes the id maps; the
//! helper then clones the init (a sibling of its own: the launcher's child) and ends. The
//! launcher's child is then cloned into the pid namespace (`setns` of the launching thread's
//! namespace for its children, put back right after).

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use sandbox_exec::child_stack::ChildStack;

use crate::launch_child::sys;

/// Ids of one sandbox's range (`sandbox_exec::userns::RANGE`).
const RANGE: u32 = sandbox_exec::userns::RANGE;

/// The programs' user namespace and the pid namespace it owns.
pub struct ProgramsNs {
    pub user: OwnedFd,
    pub pid: OwnedFd,
    /// The pid namespace's init (this process's child).
    pub init: i32,
    /// The write end of the init's stdin, for the agent alone to hold: the init ends (and every
    /// process of the namespace with it) when the agent does, however it ends.
    pub watch: OwnedFd,
}

/// What the helper reads: the id it takes and the pipes it talks on (prepared before the clone,
/// untouched until it has ended).
struct HelperPlan {
    base: u32,
    report_w: RawFd,
    done_r: RawFd,
    /// The read end of the pipe the agent holds the other end of: the init's stdin.
    watch_r: RawFd,
    /// v1 `tasks` files of the sandbox's cgroups, which the helper joins (the init is born there).
    join: Vec<RawFd>,
    agent: CString,
    argv: [*const libc::c_char; 3],
    envp: [*const libc::c_char; 1],
    init_stack: ChildStack,
}

const INIT_FLAG: &std::ffi::CStr = c"--pid-ns-init";

/// Makes the namespaces of a sandbox whose ids are the host's `base..base+RANGE`, and their init
/// (`agent` run with `--pid-ns-init`), born in the cgroups whose v1 `tasks` files are `join`.
pub fn make(base: u32, agent: &CString, join: &[RawFd]) -> std::io::Result<ProgramsNs> {
    let (report_r, report_w) = sandbox_exec::fds::pipe()?;
    let (done_r, done_w) = sandbox_exec::fds::pipe()?;
    let (watch_r, watch_w) = sandbox_exec::fds::pipe()?;
    let mut plan = Box::new(HelperPlan {
        base,
        report_w: report_w.as_raw_fd(),
        done_r: done_r.as_raw_fd(),
        watch_r: watch_r.as_raw_fd(),
        join: join.to_vec(),
        agent: agent.clone(),
        argv: [std::ptr::null(); 3],
        envp: [std::ptr::null(); 1],
        init_stack: ChildStack::new()?,
    });
    plan.argv = [plan.agent.as_ptr(), INIT_FLAG.as_ptr(), std::ptr::null()];
    let stack = ChildStack::new()?;
    // SAFETY: prctl reads this process's flag.
    let dumpable = unsafe { libc::prctl(libc::PR_GET_DUMPABLE) };
    // SAFETY: the helper runs on its own stack and reads only `plan`, which outlives it (it is
    // reaped below).
    let pid = unsafe {
        crate::launch_child::clone_blocked(
            helper_main,
            &stack,
            libc::CLONE_VM | libc::SIGCHLD,
            &*plan as *const HelperPlan as *mut libc::c_void,
        )?
    };
    drop(report_w);
    let mut report = std::fs::File::from(report_r);
    let mut done = std::fs::File::from(done_w);
    let read = |report: &mut std::fs::File| -> std::io::Result<i32> {
        let mut b = [0u8; 4];
        std::io::Read::read_exact(report, &mut b)
            .map_err(|_| std::io::Error::from_raw_os_error(libc::EPIPE))?;
        match i32::from_le_bytes(b) {
            n if n < 0 => Err(std::io::Error::from_raw_os_error(-n)),
            n => Ok(n),
        }
    };
    // The helper goes on at each byte (not at the pipe's end: a child another thread clones
    // meanwhile holds a copy of `done_w` until it execs).
    let made = (|| {
        read(&mut report)?;
        let map = format!("0 {base} {RANGE}\n");
        std::fs::write(format!("/proc/{pid}/uid_map"), &map)?;
        std::fs::write(format!("/proc/{pid}/gid_map"), &map)?;
        let user = open(&format!("/proc/{pid}/ns/user"))?;
        std::io::Write::write_all(&mut done, b"m")?;
        let init = read(&mut report)?;
        // The init is this process's child (a sibling of the helper's): its namespace for
        // children is the new pid namespace, which has an init from now on.
        let pid_ns = open(&format!("/proc/{init}/ns/pid")).inspect_err(|_| kill_init(init))?;
        Ok(ProgramsNs {
            user,
            pid: pid_ns,
            init,
            watch: watch_w,
        })
    })();
    let _ = std::io::Write::write_all(&mut done, b"x");
    drop(done);
    let mut status = 0;
    // SAFETY: reaping our own child; its plan and stack stay alive until it has ended.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    drop((plan, stack, done_r, watch_r));
    // The helper's change of ids marked the memory it shares with this process undumpable (the
    // kernel does so for any change of a task's ids); this process's own ids never changed.
    if dumpable == 1 {
        // SAFETY: prctl sets this process's flag back.
        unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 1) };
    }
    made
}

fn open(path: &str) -> std::io::Result<OwnedFd> {
    let c = CString::new(path)?;
    // SAFETY: open of a NUL-terminated path; the result, when valid, is ours.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: just opened.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Runs `clone` with the calling thread's new children in the pid namespace `pid_ns`, then puts
/// the thread's own back (its active one: `setns` allows it).
pub fn in_pid_ns<T>(
    pid_ns: &OwnedFd,
    clone: impl FnOnce() -> std::io::Result<T>,
) -> std::io::Result<T> {
    let own = open("/proc/thread-self/ns/pid")?;
    // SAFETY: setns of this thread's namespace for children, on valid fds.
    if unsafe { libc::setns(pid_ns.as_raw_fd(), libc::CLONE_NEWPID) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let result = clone();
    // SAFETY: as above; the thread's own active pid namespace is always allowed.
    if unsafe { libc::setns(own.as_raw_fd(), libc::CLONE_NEWPID) } != 0 {
        // This thread's later children would be born in the sandbox: nothing may go on here.
        eprintln!(
            "sandbox launcher: cannot return to this process's pid namespace: {}",
            std::io::Error::last_os_error()
        );
        std::process::abort();
    }
    result
}

extern "C" fn helper_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the boxed plan, alive until this helper has been reaped.
    unsafe { helper(&*(arg as *const HelperPlan)) }
}

/// The helper: raw system calls only, its own stack only (it shares this process's memory).
unsafe fn helper(p: &HelperPlan) -> ! {
    let report = |v: i32| {
        let b = v.to_le_bytes();
        sys(
            libc::SYS_write,
            [p.report_w as usize, b.as_ptr() as usize, 4],
        );
    };
    // The launcher's word: `m` (the maps are written: make the init), anything else to end.
    let wait = || {
        let mut byte = 0u8;
        sys(
            libc::SYS_read,
            [p.done_r as usize, &mut byte as *mut u8 as usize, 1],
        );
        byte
    };
    let b = p.base as usize;
    let mut r = 0;
    for fd in &p.join {
        if r == 0 {
            r = sys(libc::SYS_write, [*fd as usize, b"0".as_ptr() as usize, 1]).min(0);
        }
    }
    if r == 0 {
        r = sys(libc::SYS_setgroups, [0, 0, 0]);
    }
    if r == 0 {
        r = sys(libc::SYS_setresgid, [b, b, b]);
    }
    if r == 0 {
        r = sys(libc::SYS_setresuid, [b, b, b]);
    }
    if r == 0 {
        let flags = (libc::CLONE_NEWUSER | libc::CLONE_NEWPID) as usize;
        r = sys(libc::SYS_unshare, [flags, 0, 0]);
    }
    report(r.min(0) as i32);
    if r == 0 && wait() == b'm' {
        // The init: this process's sibling (the launcher reaps it), suspended until it execs.
        // (The C library's clone writes `errno` only when it fails, into the launching thread's,
        // which is blocked reading meanwhile.)
        let flags = libc::CLONE_VM | libc::CLONE_VFORK | libc::CLONE_PARENT | libc::SIGCHLD;
        let init = libc::clone(
            init_main,
            p.init_stack.top(),
            flags,
            p as *const HelperPlan as *mut libc::c_void,
        );
        report(if init < 0 { -libc::EAGAIN } else { init });
        wait();
    }
    loop {
        sys(libc::SYS_exit, [0, 0, 0]);
    }
}

extern "C" fn init_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the plan, alive until the helper (suspended until this execs) has ended.
    unsafe {
        let p = &*(arg as *const HelperPlan);
        // Nothing of this process goes on into the init but its stdin, the pipe it watches.
        sys(
            libc::SYS_close_range,
            [
                0,
                libc::c_uint::MAX as usize,
                libc::CLOSE_RANGE_CLOEXEC as usize,
            ],
        );
        if sys(libc::SYS_dup3, [p.watch_r as usize, 0, 0]) < 0 {
            loop {
                sys(libc::SYS_exit, [127, 0, 0]);
            }
        }
        sys(
            libc::SYS_execve,
            [
                p.agent.as_ptr() as usize,
                p.argv.as_ptr() as usize,
                p.envp.as_ptr() as usize,
            ],
        );
        loop {
            sys(libc::SYS_exit, [127, 0, 0]);
        }
    }
}

/// Kills and reaps the init (every process of its pid namespace dies with it).
pub fn kill_init(init: i32) {
    // SAFETY: signalling and reaping our own unreaped child.
    unsafe {
        libc::kill(init, libc::SIGKILL);
        let mut status = 0;
        libc::waitpid(init, &mut status, 0);
    }
}
