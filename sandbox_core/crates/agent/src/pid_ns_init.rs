//! `sandbox-agent --pid-ns-init`: the init of a local sandbox's pid namespace, which belongs to
//! the programs' user namespace (the launcher's `programs_ns` says why), run as root of that
//! user namespace.
//!
//! It is a process of the programs' own user namespace, so root inside may trace it or write its
//! memory (`/proc/1/mem`): it must hold nothing of the host's. It is started with no fd but its
//! stdin (the read end of a pipe only the agent holds the other end of), no environment and no
//! argument but this flag, and before anything else it leaves every namespace it was born in but
//! the pid and time ones (the host's mount, network, ipc, uts and cgroup namespaces) for empty
//! ones of its own, with an empty read-only root, and wears a seccomp filter that lets it only
//! read and end. It ends at the pipe's end, i.e. when the agent ends, however it does, and every
//! process of the namespace with it. Its children (the orphans no subreaper takes: a restored
//! program whose restorer ended) are reaped by the kernel (SIGCHLD ignored). Signals from inside
//! its pid namespace reach it only for those it handles (none); the launcher kills it, and every
//! process of the namespace with it.

use std::ffi::CStr;

/// The flag, first and only argument, that runs this instead of the agent.
pub const FLAG: &str = "--pid-ns-init";

pub fn run() -> ! {
    // SAFETY: raw system calls on static strings; this process has one thread.
    let code = unsafe { isolate() };
    if code != 0 {
        // Never wait with the host's view: the launcher's clone of the agent into this
        // namespace then fails, and the launch with it.
        std::process::exit(code);
    }
    // SAFETY: signal disposition, prctl and a read into a local buffer.
    unsafe {
        libc::signal(libc::SIGCHLD, libc::SIG_IGN);
        if confine() != 0 {
            std::process::exit(8);
        }
        // Nothing is ever written: the read returns at the pipe's end, once the agent is gone.
        let mut byte = 0u8;
        loop {
            let n = libc::read(0, (&mut byte as *mut u8).cast(), 1);
            if n == 0 || (n < 0 && *libc::__errno_location() != libc::EINTR) {
                libc::_exit(0);
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;

/// A seccomp filter that lets it read and end, nothing else: code written into its memory by
/// root inside (whose user namespace it is in) can do no more than end it, which ends the
/// sandbox. Any other call kills it.
unsafe fn confine() -> i32 {
    let allowed = [
        libc::SYS_read,
        libc::SYS_rt_sigreturn,
        libc::SYS_restart_syscall,
        libc::SYS_exit,
        libc::SYS_exit_group,
    ];
    let stmt = |code: u32, k: u32| libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    };
    let jeq = |k: u32, jt: u8, jf: u8| libc::sock_filter {
        code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
        jt,
        jf,
        k,
    };
    let load = libc::BPF_LD | libc::BPF_W | libc::BPF_ABS;
    let ret = libc::BPF_RET | libc::BPF_K;
    let n = allowed.len() as u8;
    let mut prog = vec![
        stmt(load, 4), // seccomp_data.arch
        jeq(AUDIT_ARCH, 1, 0),
        stmt(ret, libc::SECCOMP_RET_KILL_PROCESS),
        stmt(load, 0), // seccomp_data.nr
    ];
    for (i, nr) in allowed.iter().enumerate() {
        // To the allow below the kill: past the rest of the checks and the kill.
        prog.push(jeq(*nr as u32, n - i as u8, 0));
    }
    prog.push(stmt(ret, libc::SECCOMP_RET_KILL_PROCESS));
    prog.push(stmt(ret, libc::SECCOMP_RET_ALLOW));
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_mut_ptr(),
    };
    if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
        return 1;
    }
    libc::prctl(
        libc::PR_SET_SECCOMP,
        libc::SECCOMP_MODE_FILTER,
        &fprog as *const libc::sock_fprog,
    )
}

/// Empty namespaces of its own and an empty read-only root; the step that failed (1..) or 0.
unsafe fn isolate() -> i32 {
    let c = |s: &'static CStr| s.as_ptr();
    // Its stdin is the pipe it watches; the /dev/null the runtime may have opened for the host's
    // closed stdout and stderr goes.
    libc::syscall(libc::SYS_close_range, 1, libc::c_uint::MAX, 0);
    let flags = libc::CLONE_NEWNS
        | libc::CLONE_NEWNET
        | libc::CLONE_NEWIPC
        | libc::CLONE_NEWUTS
        | libc::CLONE_NEWCGROUP;
    if libc::unshare(flags) != 0 {
        return 1;
    }
    let none = std::ptr::null::<libc::c_char>();
    if libc::mount(
        none,
        c(c"/"),
        none,
        libc::MS_REC | libc::MS_PRIVATE,
        std::ptr::null(),
    ) != 0
    {
        return 2;
    }
    // Any directory of the old root serves as the new root's mount point: it is gone once
    // the old root is detached.
    let at = c"/tmp";
    let ro = libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
    if libc::mount(c(c"none"), c(at), c(c"tmpfs"), ro, c(c"size=4k").cast()) != 0 {
        return 3;
    }
    if libc::chdir(c(at)) != 0 {
        return 4;
    }
    if libc::syscall(libc::SYS_pivot_root, c(c"."), c(c".")) != 0 {
        return 5;
    }
    if libc::umount2(c(c"."), libc::MNT_DETACH) != 0 {
        return 6;
    }
    if libc::chdir(c(c"/")) != 0 {
        return 7;
    }
    0
}
