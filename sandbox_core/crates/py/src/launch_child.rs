//! The launcher's child: cloned with new namespaces, it waits for the launcher's go, joins its
//! cgroup (v1), and execs the agent.
//!
//! It is cloned like `posix_spawn` clones (`CLONE_VM`: it runs on a stack of its own in this
//! process's memory until it execs) rather than forked, because a fork copies the page tables of
//! the whole client process and holds its memory map locked for writing meanwhile. In a Python
//! process of 1 GB that made every sandbox start 30 ms slower (28 ms per GB, measured), and every
//! thread of the client that touched a new page waited; an RL trainer holds many GB. Unlike
//! `posix_spawn` the parent is not suspended until the exec (`CLONE_VFORK`): the child waits for
//! the launcher to map its ids first, so both run at once in one address space. Hence:
//! - everything the child reads is prepared before the clone and stays in place, untouched, until
//!   the child has exec'd or died ([`ChildMemory`], owned by the launch until then);
//! - the child writes nothing but its own stack: it makes raw system calls that return `-errno`
//!   (the C library's wrappers would write `errno`, which lives in the calling thread's
//!   thread-local storage, shared with the child);
//! - it starts with every signal blocked (the parent blocks them around the clone), and resets
//!   every caught signal to its default before unblocking them, so no handler of this process ever
//!   runs in the child (it has its own copy of the handler table: no `CLONE_SIGHAND`).

use std::ffi::CString;
use std::os::fd::RawFd;

use sandbox_exec::child_stack::ChildStack;
use sandbox_exec::Step;

/// Everything the child needs, prepared before the clone.
pub struct ChildPlan {
    pub path: CString,
    pub argv: Vec<CString>,
    pub envp: Vec<CString>,
    pub sync_r: RawFd,
    pub listen: RawFd,
    pub ready_w: RawFd,
    pub token_r: RawFd,
    pub err_w: RawFd,
    pub devnull: RawFd,
    pub new_cgroupns: bool,
    /// v1 `tasks` files of the sandbox's cgroups, which the child joins itself (writing "0").
    pub join: Vec<RawFd>,
    /// A connection to a Python template process, handed over at `TEMPLATE_FD` (-1: none).
    pub template: RawFd,
    /// The programs' user namespace (`programs_ns`), handed over at `USERNS_FD` (-1: none).
    pub userns: RawFd,
    /// The write end of the pid namespace's init's pipe (`programs_ns`), handed over at
    /// `INIT_WATCH_FD` (-1: none).
    pub init_watch: RawFd,
}

/// Where the agent finds its connection to a Python template (`--python-template-fd`).
pub const TEMPLATE_FD: RawFd = 6;
/// Where the agent finds the programs' user namespace the launcher made (`--userns-fd`).
pub const USERNS_FD: RawFd = 7;
/// Where the agent finds the pipe its pid namespace's init watches (`--init-watch-fd`).
pub const INIT_WATCH_FD: RawFd = 8;

/// The memory a running child uses: its plan, the pointer arrays for execve, and its stack.
/// Dropping it while the child has neither exec'd nor died would pull memory from under it, so
/// the launch keeps it until then (`Inner::kill` reaps before it is dropped).
pub struct ChildMemory {
    plan: ChildPlan,
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
    stack: ChildStack,
}

// SAFETY: the raw pointers point into `plan` (owned, never moved: the memory is boxed); nothing
// mutates them after construction.
unsafe impl Send for ChildMemory {}
// SAFETY: as above; shared access only reads.
unsafe impl Sync for ChildMemory {}

/// Clones the child with `flags` (namespaces) and `CLONE_VM`; returns its pid and the memory it
/// runs in, or the clone's error.
pub fn spawn(plan: ChildPlan, flags: libc::c_int) -> std::io::Result<(i32, Box<ChildMemory>)> {
    let stack = ChildStack::new()?;
    let mut argv: Vec<*const libc::c_char> = plan.argv.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let mut envp: Vec<*const libc::c_char> = plan.envp.iter().map(|a| a.as_ptr()).collect();
    envp.push(std::ptr::null());
    let mem = Box::new(ChildMemory {
        plan,
        argv,
        envp,
        stack,
    });
    // SAFETY: the child runs on its own stack and reads only `mem`, which the launch keeps until
    // it has exec'd or been reaped.
    let pid = unsafe {
        clone_blocked(
            child_main,
            &mem.stack,
            flags | libc::CLONE_VM | libc::SIGCHLD,
            &*mem as *const ChildMemory as *mut libc::c_void,
        )?
    };
    Ok((pid, mem))
}

/// Clones `f(arg)` on `stack` with `flags`, every signal blocked around the clone (the child
/// starts with them blocked, and runs no handler of this process before it resets them); the
/// calling thread's mask is restored right after.
///
/// # Safety
/// `f` and whatever `arg` points to must stay valid for as long as the child runs in this
/// process's memory (`CLONE_VM`).
pub(crate) unsafe fn clone_blocked(
    f: extern "C" fn(*mut libc::c_void) -> libc::c_int,
    stack: &ChildStack,
    flags: libc::c_int,
    arg: *mut libc::c_void,
) -> std::io::Result<i32> {
    let mut all: libc::sigset_t = std::mem::zeroed();
    let mut old: libc::sigset_t = std::mem::zeroed();
    libc::sigfillset(&mut all);
    libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
    // The C library's clone runs `f` on the new stack (its top: stacks grow down on every
    // architecture this builds for) and exits with its result.
    let pid = libc::clone(f, stack.top(), flags, arg);
    let e = std::io::Error::last_os_error();
    libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
    if pid < 0 {
        return Err(e);
    }
    Ok(pid)
}

extern "C" fn child_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the boxed ChildMemory, kept alive by the parent until we exec or die.
    unsafe { child(&*(arg as *const ChildMemory)) }
}

/// The child side. Never returns; touches no memory but its own stack (see the module docs).
unsafe fn child(m: &ChildMemory) -> ! {
    let p = &m.plan;
    let fail = |step: Step, ret: isize| -> ! {
        let errno = if ret < 0 { -ret } else { 0 } as i32;
        let msg = [
            step as u8,
            (errno & 0xff) as u8,
            ((errno >> 8) & 0xff) as u8,
        ];
        sys(
            libc::SYS_write,
            [p.err_w as usize, msg.as_ptr() as usize, 3],
        );
        sys(libc::SYS_exit_group, [127, 0, 0]);
        unreachable_exit()
    };
    // Wait until the parent has mapped our ids (and, on cgroup v2, put us in the cgroup).
    let mut b = 0u8;
    let r = sys(
        libc::SYS_read,
        [p.sync_r as usize, &mut b as *mut u8 as usize, 1],
    );
    if r != 1 {
        fail(Step::Sync, r);
    }
    for fd in &p.join {
        let r = sys(libc::SYS_write, [*fd as usize, b"0".as_ptr() as usize, 1]);
        if r != 1 {
            fail(Step::JoinCgroup, r);
        }
    }
    if p.new_cgroupns {
        let r = sys(libc::SYS_unshare, [libc::CLONE_NEWCGROUP as usize, 0, 0]);
        if r != 0 {
            fail(Step::CgroupNamespace, r);
        }
    }
    let r = sys(libc::SYS_setsid, [0, 0, 0]);
    if r < 0 {
        fail(Step::SetSid, r);
    }
    // Move every fd we hand over out of the way of 0..6 first, then into place (dup3 clears
    // CLOEXEC): listen -> 3, ready -> 4, token -> 5, /dev/null -> 0 and 1, the template -> 6,
    // the programs' user namespace -> 7, the init's pipe -> 8.
    let srcs = [
        p.listen,
        p.ready_w,
        p.token_r,
        p.devnull,
        p.template,
        p.userns,
        p.init_watch,
    ];
    let mut high = [0usize; 7];
    for (i, fd) in srcs.iter().enumerate() {
        if *fd < 0 {
            continue;
        }
        let r = sys(
            libc::SYS_fcntl,
            [*fd as usize, libc::F_DUPFD_CLOEXEC as usize, 100],
        );
        if r < 0 {
            fail(Step::Fds, r);
        }
        high[i] = r as usize;
    }
    // Nothing else of this process reaches the agent: every fd from 6 up is closed at the exec
    // (the client's own inheritable fds, a library's opened without O_CLOEXEC), `err_w` among
    // them, but those placed next (dup3 clears CLOEXEC).
    close_others_on_exec(6);
    for (from, to) in [
        (high[0], 3),
        (high[1], 4),
        (high[2], 5),
        (high[3], 0),
        (high[3], 1),
        (high[4], TEMPLATE_FD as usize),
        (high[5], USERNS_FD as usize),
        (high[6], INIT_WATCH_FD as usize),
    ] {
        if from == 0 {
            continue; // no template, no user namespace
        }
        let r = sys(libc::SYS_dup3, [from, to, 0]);
        if r < 0 {
            fail(Step::Fds, r);
        }
    }
    // No handler of the parent may run here: caught signals back to their defaults (an exec
    // would do the same), then unblock.
    let dfl = KernelSigaction::default();
    for sig in 1..=64usize {
        let mut old = KernelSigaction::default();
        let size = std::mem::size_of::<u64>();
        let r = sys4(
            libc::SYS_rt_sigaction,
            [sig, 0, &mut old as *mut KernelSigaction as usize, size],
        );
        if r == 0 && old.handler != libc::SIG_DFL && old.handler != libc::SIG_IGN {
            sys4(
                libc::SYS_rt_sigaction,
                [sig, &dfl as *const KernelSigaction as usize, 0, size],
            );
        }
    }
    let none = 0u64;
    sys4(
        libc::SYS_rt_sigprocmask,
        [
            libc::SIG_SETMASK as usize,
            &none as *const u64 as usize,
            0,
            8,
        ],
    );
    let r = sys(
        libc::SYS_execve,
        [
            p.path.as_ptr() as usize,
            m.argv.as_ptr() as usize,
            m.envp.as_ptr() as usize,
        ],
    );
    fail(Step::ExecAgent, r)
}

/// Marks every fd from `first` up close-on-exec: `close_range` (Linux 5.11), else one `fcntl` per
/// fd below the soft `RLIMIT_NOFILE` (no fd can be above it). Raw calls only (see the module docs).
unsafe fn close_others_on_exec(first: usize) {
    let r = sys(
        libc::SYS_close_range,
        [
            first,
            libc::c_uint::MAX as usize,
            libc::CLOSE_RANGE_CLOEXEC as usize,
        ],
    );
    if r == 0 {
        return;
    }
    let mut limit = libc::rlimit64 {
        rlim_cur: 0,
        rlim_max: 0,
    };
    let r = sys4(
        libc::SYS_prlimit64,
        [
            0,
            libc::RLIMIT_NOFILE as usize,
            0,
            &mut limit as *mut libc::rlimit64 as usize,
        ],
    );
    let top = if r == 0 {
        limit.rlim_cur.min(1 << 20) as usize
    } else {
        1 << 16
    };
    for fd in first..top {
        sys(
            libc::SYS_fcntl,
            [fd, libc::F_SETFD as usize, libc::FD_CLOEXEC as usize],
        );
    }
}

/// The kernel's `struct sigaction` for rt_sigaction (the same layout on x86_64 and aarch64).
#[repr(C)]
#[derive(Default)]
struct KernelSigaction {
    handler: libc::sighandler_t,
    flags: u64,
    restorer: usize,
    mask: u64,
}

fn unreachable_exit() -> ! {
    loop {
        // SAFETY: exit_group does not return; the loop only satisfies the type.
        unsafe { sys(libc::SYS_exit_group, [127, 0, 0]) };
    }
}

/// A system call with three arguments; failure is a negative errno, and nothing but registers
/// is written.
pub(crate) unsafe fn sys(n: libc::c_long, a: [usize; 3]) -> isize {
    sys4(n, [a[0], a[1], a[2], 0])
}

#[cfg(target_arch = "x86_64")]
unsafe fn sys4(n: libc::c_long, a: [usize; 4]) -> isize {
    let ret: isize;
    std::arch::asm!(
        "syscall",
        inlateout("rax") n as isize => ret,
        in("rdi") a[0],
        in("rsi") a[1],
        in("rdx") a[2],
        in("r10") a[3],
        lateout("rcx") _,
        lateout("r11") _,
        options(nostack),
    );
    ret
}

#[cfg(target_arch = "aarch64")]
unsafe fn sys4(n: libc::c_long, a: [usize; 4]) -> isize {
    let ret: isize;
    std::arch::asm!(
        "svc 0",
        in("x8") n,
        inlateout("x0") a[0] as isize => ret,
        in("x1") a[1],
        in("x2") a[2],
        in("x3") a[3],
        options(nostack),
    );
    ret
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!("the local launcher's child makes raw system calls for x86_64 and aarch64 only");
