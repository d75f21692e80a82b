//! The one place in the process that waits for children.
//!
//! The agent is a child subreaper (often pid 1 of its pid namespace), so orphaned grandchildren
//! of user programs are reparented to it and must be reaped or they pile up as zombies. Waiting per
//! child (std / tokio `Child`) cannot see those, and two waiters in one process steal each other's
//! statuses. So a single reaper, driven by SIGCHLD, loops `wait4` over every exited child and hands
//! the status of registered pids to their waiter; orphans are reaped and forgotten.
//!
//! Consequence for the rest of the process: nothing else may wait for children (no
//! `std::process::Command::status`, no `tokio::process`), or it will find them already reaped.
//!
//! The reaper runs on its own thread with a small current-thread runtime, not on the caller's
//! runtime: it is process-wide state and must outlive any one runtime (tests, embedders with
//! several runtimes).
//!
//! Races closed by the map lock:
//! - a child exiting before it is registered: the clone (whose caller is suspended until the child
//!   has exec'd, which can take a while) is made without the lock, but counted in `spawning`, and
//!   while that count is not zero the reaper leaves unregistered zombies alone (they may be a
//!   child about to be registered) and notes it in `deferred`; the spawn, once it has registered
//!   its child under the lock, runs the reaping it deferred;
//! - pid reuse: a pid is only freed by `wait4` under the lock, so while a pid is in the map it
//!   still names our child (possibly a zombie) and its process group id is still allocated.

use std::collections::HashMap;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use tokio::sync::oneshot;

use crate::child_stack::ChildStack;

/// What `wait4` reported for one child.
#[derive(Clone, Copy)]
pub struct ExitInfo {
    /// Raw wait status (`WIFEXITED`, `WTERMSIG`, ... apply).
    pub status: libc::c_int,
    pub rusage: libc::rusage,
}

impl std::fmt::Debug for ExitInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExitInfo")
            .field("status", &self.status)
            .field("maxrss_kib", &self.rusage.ru_maxrss)
            .finish()
    }
}

impl ExitInfo {
    pub fn exit_code(&self) -> Option<i32> {
        libc::WIFEXITED(self.status).then(|| libc::WEXITSTATUS(self.status))
    }
    pub fn signal(&self) -> Option<i32> {
        libc::WIFSIGNALED(self.status).then(|| libc::WTERMSIG(self.status))
    }
}

/// A registered child: where its exit status goes, and whether its process group is killed when
/// it is reaped (the default: what it left behind dies with it) or kept (`keep_group`).
struct Waiter {
    tx: oneshot::Sender<ExitInfo>,
    keep_group: bool,
}

type Waiters = HashMap<libc::pid_t, Waiter>;

/// Whether reaping `pid` kills its process group first.
fn kills_group(waiters: &Waiters, pid: libc::pid_t) -> bool {
    waiters.get(&pid).is_some_and(|w| !w.keep_group)
}

/// State shared with the reaper thread.
#[derive(Default)]
struct Shared {
    waiters: Mutex<Waiters>,
    /// Clones in progress whose child is not registered yet.
    spawning: AtomicUsize,
    /// The reaper left a zombie alone because of `spawning`.
    deferred: AtomicBool,
}

/// Handle to the process-wide reaper.
pub struct Reaper {
    shared: Arc<Shared>,
    /// Stack of children started by [`Reaper::spawn_registered`], one spawn at a time (the child
    /// is done with it when the spawn returns).
    child_stack: Mutex<ChildStack>,
}

/// The child side of [`Reaper::spawn_registered`].
pub type ChildFn = extern "C" fn(*mut libc::c_void) -> libc::c_int;

/// A child started by [`Reaper::spawn_registered`].
pub struct Child {
    pub pid: libc::pid_t,
    /// Its exit status, sent by whoever reaps it (see [`Reaper::try_reap`]).
    pub exit: oneshot::Receiver<ExitInfo>,
    /// A pidfd (close-on-exec), readable once the child has exited; `None` on kernels before 5.2.
    pub pidfd: Option<OwnedFd>,
}

static REAPER: OnceLock<Reaper> = OnceLock::new();
static START: Mutex<()> = Mutex::new(());

impl Reaper {
    /// The process-wide reaper, started on first use.
    pub fn global() -> io::Result<&'static Reaper> {
        if let Some(r) = REAPER.get() {
            return Ok(r);
        }
        // Serialise starts so a failed start can be retried and two callers never start two.
        let _g = START.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(r) = REAPER.get() {
            return Ok(r);
        }
        let reaper = Reaper::start()?;
        Ok(REAPER.get_or_init(|| reaper))
    }

    fn start() -> io::Result<Reaper> {
        let state: Arc<Shared> = Arc::default();
        let shared = state.clone();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<io::Result<()>>();
        std::thread::Builder::new()
            .name("sandbox-reaper".into())
            .spawn(move || {
                // SCHED_BATCH: woken by SIGCHLD, this thread must not preempt the thread the
                // signal arrived on, which usually reaps the program itself (`try_reap`) and
                // answers its caller; orphans can wait a moment. Best effort.
                // SAFETY: plain syscall on this thread, with a valid sched_param.
                unsafe {
                    let param = libc::sched_param { sched_priority: 0 };
                    libc::sched_setscheduler(0, libc::SCHED_BATCH, &param);
                }
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_io()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                rt.block_on(async move {
                    use tokio::signal::unix::{signal, SignalKind};
                    let mut sigchld = match signal(SignalKind::child()) {
                        Ok(s) => s,
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                            return;
                        }
                    };
                    let _ = ready_tx.send(Ok(()));
                    loop {
                        // Signals coalesce: one SIGCHLD may stand for many exits, so drain them all.
                        reap_all(&shared);
                        if sigchld.recv().await.is_none() {
                            tracing::error!(
                                "SIGCHLD stream ended; children will no longer be reaped"
                            );
                            return;
                        }
                    }
                });
            })?;
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(Reaper {
                shared: state,
                child_stack: Mutex::new(ChildStack::new()?),
            }),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(io::Error::other("reaper thread exited during start-up")),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Waiters> {
        self.shared
            .waiters
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Starts a child the way `posix_spawn` does, `clone(CLONE_VM | CLONE_VFORK)`: the child
    /// shares this process's memory and runs `child(arg)` on a stack of its own while the calling
    /// thread is suspended, until the child has exec'd or exited. Nothing is copied (no page
    /// tables, no copy-on-write faults), so the cost does not grow with the size of the caller,
    /// and when this returns the child is past exec or gone, so memory it wrote (a failure report)
    /// can be read at once. The pid is registered before the reaper can see the child's exit.
    ///
    /// All signals are blocked in the calling thread across the clone, so the child starts with
    /// every signal blocked (no handler of the parent can run on shared memory): `child` must reset
    /// dispositions and unblock before exec.
    ///
    /// # Safety
    /// `child` runs on shared memory, concurrently with the parent's other threads: it may only
    /// read memory the suspended caller keeps alive, write memory nobody else uses, and make raw
    /// system calls or libc wrappers without process-wide side effects (no allocation, no locks,
    /// no glibc `set*id` wrappers, no atexit: it must `execve` or `_exit`, never return normally
    /// except with an exit code).
    pub unsafe fn spawn_registered(
        &self,
        child: ChildFn,
        arg: *mut libc::c_void,
        keep_group: bool,
    ) -> io::Result<Child> {
        let (tx, rx) = oneshot::channel();
        let stack = self.child_stack.lock().unwrap_or_else(|e| e.into_inner());
        self.shared.spawning.fetch_add(1, Ordering::SeqCst);
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        // Setting the uid in a child that shares our memory makes the shared mm non-dumpable
        // (which keeps other programs of that uid from attaching to the child before it execs);
        // the agent's own state is restored once the child has its own mm.
        let dumpable = libc::prctl(libc::PR_GET_DUMPABLE, 0, 0, 0, 0);
        let flags = libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD;
        let mut pidfd: libc::c_int = -1;
        let mut pid = libc::clone(
            child,
            stack.top(),
            flags | libc::CLONE_PIDFD,
            arg,
            &mut pidfd as *mut libc::c_int,
        );
        if pid < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
            // No CLONE_PIDFD (Linux < 5.2): the exit is then known from the SIGCHLD reaper only.
            pidfd = -1;
            pid = libc::clone(child, stack.top(), flags, arg);
        }
        let clone_err = io::Error::last_os_error();
        if dumpable > 0 && libc::prctl(libc::PR_GET_DUMPABLE, 0, 0, 0, 0) != dumpable {
            libc::prctl(libc::PR_SET_DUMPABLE, dumpable as libc::c_ulong, 0, 0, 0);
        }
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        drop(stack);
        if pid >= 0 {
            self.lock().insert(pid, Waiter { tx, keep_group });
        }
        self.shared.spawning.fetch_sub(1, Ordering::SeqCst);
        if self.shared.deferred.swap(false, Ordering::SeqCst) {
            reap_all(&self.shared);
        }
        if pid < 0 {
            return Err(clone_err);
        }
        Ok(Child {
            pid,
            exit: rx,
            // SAFETY: with CLONE_PIDFD the kernel stored a new fd that nobody else owns.
            pidfd: (pidfd >= 0).then(|| OwnedFd::from_raw_fd(pidfd)),
        })
    }

    /// Announces that a child made elsewhere is about to be adopted (a zygote's worker, reparented
    /// to this subreaper): until the returned guard adopts it or is dropped, the reaper leaves
    /// unregistered zombies alone, exactly as while a spawn is in progress, so the child cannot be
    /// reaped (and its pid freed) before it is registered.
    pub fn begin_adopt(&self) -> Adoption<'_> {
        self.shared.spawning.fetch_add(1, Ordering::SeqCst);
        Adoption { reaper: self }
    }

    /// Drops one `spawning` count and runs the reaping it deferred.
    fn end_spawning(&self) {
        self.shared.spawning.fetch_sub(1, Ordering::SeqCst);
        if self.shared.deferred.swap(false, Ordering::SeqCst) {
            reap_all(&self.shared);
        }
    }

    /// Reaps `pid` now if it has exited (its pidfd became readable): the exit status without
    /// waiting for the reaper thread to be woken by SIGCHLD, which costs two thread wake-ups.
    /// Whichever of the two gets to it first reaps it, the other finds it gone; like the reaper,
    /// this kills the child's process group before reaping (see `reap_all`). `None`: not exited
    /// yet, or already reaped (then the status is on its way in `rx`).
    pub fn try_reap(
        &self,
        pid: libc::pid_t,
        rx: &mut oneshot::Receiver<ExitInfo>,
    ) -> Option<ExitInfo> {
        let mut waiters = self.lock();
        if let Ok(info) = rx.try_recv() {
            return Some(info);
        }
        if !waiters.contains_key(&pid) {
            return None;
        }
        // SAFETY: zeroed siginfo is a valid out-parameter; plain syscall.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let flags = libc::WEXITED | libc::WNOHANG | libc::WNOWAIT | libc::__WALL;
        // SAFETY: plain syscall with a valid out-pointer.
        if unsafe { libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, flags) } != 0
            // SAFETY: filled by waitid (or zeroed: si_pid 0).
            || unsafe { info.si_pid() } != pid
        {
            return None;
        }
        if kills_group(&waiters, pid) {
            // SAFETY: plain syscall; ESRCH (no other member) is fine.
            unsafe { libc::killpg(pid, libc::SIGKILL) };
        }
        let mut status = 0;
        // SAFETY: zeroed rusage is a valid out-parameter.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        loop {
            // SAFETY: plain syscall with valid out-pointers.
            let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG | libc::__WALL, &mut ru) };
            if r == pid {
                waiters.remove(&pid);
                return Some(ExitInfo { status, rusage: ru });
            }
            if r < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return None;
        }
    }

    /// Sends `sig` to the process group led by `pid` if `pid` has not been reaped yet. Under the
    /// lock the group id cannot have been recycled, so this never signals a stranger.
    pub fn signal_group(&self, pid: libc::pid_t, sig: libc::c_int) -> io::Result<()> {
        let waiters = self.lock();
        if !waiters.contains_key(&pid) {
            return Err(io::Error::from_raw_os_error(libc::ESRCH));
        }
        // SAFETY: plain syscall.
        if unsafe { libc::killpg(pid, sig) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Sends `sig` to `pid` itself if it has not been reaped yet (same guarantee as above).
    pub fn signal_pid(&self, pid: libc::pid_t, sig: libc::c_int) -> io::Result<()> {
        let waiters = self.lock();
        if !waiters.contains_key(&pid) {
            return Err(io::Error::from_raw_os_error(libc::ESRCH));
        }
        // SAFETY: plain syscall.
        if unsafe { libc::kill(pid, sig) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Waits synchronously for a registered child that is known to be exiting right now (a child
    /// that reported a failed start step and called `_exit`). Used where no runtime can be awaited.
    pub fn reap_blocking(
        &self,
        pid: libc::pid_t,
        mut rx: oneshot::Receiver<ExitInfo>,
    ) -> Option<ExitInfo> {
        let mut waiters = self.lock();
        // The reaper may have been faster.
        if let Ok(info) = rx.try_recv() {
            return Some(info);
        }
        // Still registered: the child is unreaped and, with the lock held, stays ours to wait for.
        waiters.remove(&pid)?;
        let mut status = 0;
        // SAFETY: zeroed rusage is a valid out-parameter.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        loop {
            // SAFETY: plain syscall with valid out-pointers.
            let r = unsafe { libc::wait4(pid, &mut status, libc::__WALL, &mut ru) };
            if r == pid {
                return Some(ExitInfo { status, rusage: ru });
            }
            if r < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return None;
        }
    }

    /// Whether `pid` is a registered child not reaped yet (alive or a zombie).
    pub fn is_registered(&self, pid: libc::pid_t) -> bool {
        self.lock().contains_key(&pid)
    }

    /// Number of children waited for right now.
    pub fn registered(&self) -> usize {
        self.lock().len()
    }
}

/// A child about to be adopted (see [`Reaper::begin_adopt`]).
pub struct Adoption<'a> {
    reaper: &'a Reaper,
}

impl Adoption<'_> {
    /// Registers `pid`, which must be a child of this process by now (checked: a pid that is not
    /// our child is refused), alive or a zombie, and opens a pidfd for it.
    pub fn adopt(self, pid: libc::pid_t) -> io::Result<Child> {
        if pid <= 0 {
            return Err(io::Error::from_raw_os_error(libc::ESRCH));
        }
        let (tx, rx) = oneshot::channel();
        {
            let mut waiters = self.reaper.lock();
            // Under the lock nobody reaps: a child of ours (alive or zombie) answers here, and
            // anything else (not our child, or a pid already registered) fails.
            // SAFETY: zeroed siginfo is a valid out-parameter; plain syscall.
            let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
            let flags = libc::WEXITED | libc::WNOHANG | libc::WNOWAIT | libc::__WALL;
            // SAFETY: plain syscall with a valid out-pointer.
            if unsafe { libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, flags) } != 0 {
                return Err(io::Error::last_os_error());
            }
            if waiters.contains_key(&pid) {
                return Err(io::Error::from_raw_os_error(libc::EEXIST));
            }
            waiters.insert(
                pid,
                Waiter {
                    tx,
                    keep_group: false,
                },
            );
        }
        // Registered and unreaped: the pid cannot be reused, so the pidfd names our child.
        // SAFETY: plain syscall; the result is a new fd or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        Ok(Child {
            pid,
            exit: rx,
            // SAFETY: pidfd_open returned a new fd (close-on-exec) that nobody else owns.
            pidfd: (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) }),
        })
    }
}

impl Drop for Adoption<'_> {
    fn drop(&mut self) {
        self.reaper.end_spawning();
    }
}

/// Reaps every exited child. Before reaping a registered program, kills its process group: the
/// exited program is still a zombie, so its group id is still ours, and background processes of a
/// finished exec must not outlive it.
fn reap_all(shared: &Shared) {
    loop {
        let mut waiters = shared.waiters.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: zeroed siginfo is a valid out-parameter.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let flags = libc::WEXITED | libc::WNOHANG | libc::WNOWAIT | libc::__WALL;
        // SAFETY: plain syscall with a valid out-pointer.
        let r = unsafe { libc::waitid(libc::P_ALL, 0, &mut info, flags) };
        if r < 0 {
            if io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return; // ECHILD: no children at all
        }
        // SAFETY: waitid filled a SIGCHLD siginfo (or left it zeroed: si_pid 0).
        let pid = unsafe { info.si_pid() };
        if pid == 0 {
            return; // children exist, none has exited
        }
        if waiters.contains_key(&pid) {
            if kills_group(&waiters, pid) {
                // SAFETY: plain syscall; ESRCH (no other member) is fine.
                unsafe { libc::killpg(pid, libc::SIGKILL) };
            }
        } else if shared.spawning.load(Ordering::SeqCst) > 0 {
            // Maybe a child whose spawn has not registered it yet: leave it to that spawn.
            shared.deferred.store(true, Ordering::SeqCst);
            return;
        }
        let mut status = 0;
        // SAFETY: zeroed rusage is a valid out-parameter.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: plain syscall with valid out-pointers.
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG | libc::__WALL, &mut ru) };
        if r < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        if r != pid {
            return;
        }
        if let Some(w) = waiters.remove(&pid) {
            let _ = w.tx.send(ExitInfo { status, rusage: ru });
        }
    }
}
