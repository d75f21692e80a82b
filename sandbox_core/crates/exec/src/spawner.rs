//! A thread that wears the seccomp filter, so children cloned from it start with it.
//!
//! Attaching a filter is not cheap: the kernel JIT-compiles it and runs it once per syscall number
//! to precompute its action cache, tens of microseconds per exec. A filter is inherited across
//! clone, and filters are per thread unless synchronised, so one thread of the agent installs it
//! on itself (after `no_new_privs`, which it then also passes on) and clones every child that
//! needs it: the child carries exactly the filter it would have attached itself, for free. The
//! thread does nothing else; it blocks every signal, so it never runs a handler.
//!
//! A thread that may wear the filter itself does better still: `wear_on_this_thread` installs it
//! there, and children cloned from that thread inherit it with no hand-over at all (the agent's
//! serving thread does this once set up; see `Executor::wear_seccomp_on_this_thread`). The
//! spawner thread serves every other caller (tests, embedders with several runtimes).
//!
//! The caller hands over a job and blocks until it is done (`Executor::start` is synchronous
//! anyway). To keep that hand-over on one CPU (waking a thread on another CPU costs an
//! inter-processor interrupt, dear in a VM), the spawner is first moved to the caller's CPU.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

use crate::seccomp::Filter;

/// A unit of work for the spawner thread: a pointer to the caller's closure, valid while the
/// caller waits for `done`.
struct Job(*mut (dyn FnMut() + Send));

// SAFETY: the closure is `Send`, and the caller keeps it alive (and untouched) until the spawner
// has run it and set `done`.
unsafe impl Send for Job {}

#[derive(Default)]
struct State {
    job: Option<Job>,
    done: bool,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    finished: Condvar,
}

pub(crate) struct Spawner {
    program: Vec<libc::sock_filter>,
    tid: libc::pid_t,
    shared: Arc<Shared>,
    /// One job at a time.
    door: Mutex<()>,
}

static SPAWNER: OnceLock<Option<Spawner>> = OnceLock::new();

thread_local! {
    /// The filter program this thread installed on itself with [`wear_on_this_thread`].
    static WORN: std::cell::RefCell<Option<Vec<libc::sock_filter>>> =
        const { std::cell::RefCell::new(None) };
}

fn same_program(a: &[libc::sock_filter], b: &[libc::sock_filter]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(a, b)| (a.code, a.jt, a.jf, a.k) == (b.code, b.jt, b.jf, b.k))
}

/// Installs `no_new_privs` and `filter` on the calling thread (not the process: no TSYNC), so
/// that children it clones inherit the filter. The spawner thread puts it on this way; a caller
/// that does so itself needs no hand-over to the spawner. The thread is then under the deny-list
/// for good.
pub(crate) fn wear_on_this_thread(filter: &Filter) -> std::io::Result<()> {
    if this_thread_wears(filter) {
        return Ok(());
    }
    if WORN.with(|w| w.borrow().is_some()) {
        return Err(std::io::Error::other(
            "this thread wears another seccomp filter",
        ));
    }
    let program = filter.program().to_vec();
    let prog = libc::sock_fprog {
        len: program.len() as u16,
        filter: program.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: plain syscalls on this thread; `prog` points at `program`, alive across the call.
    let r = unsafe {
        libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0
            && libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER as libc::c_ulong,
                &prog as *const libc::sock_fprog,
            ) == 0
    };
    if !r {
        return Err(std::io::Error::last_os_error());
    }
    WORN.with(|w| *w.borrow_mut() = Some(program));
    Ok(())
}

/// Whether the calling thread wears exactly `filter` (see [`wear_on_this_thread`]).
pub(crate) fn this_thread_wears(filter: &Filter) -> bool {
    WORN.with(|w| {
        w.borrow()
            .as_deref()
            .is_some_and(|p| same_program(p, filter.program()))
    })
}

impl Spawner {
    /// The process's spawner for `filter`, started on first use. `None` if it cannot run (the
    /// filter cannot be installed on a thread here) or wears another filter: the caller then
    /// has the child attach the filter itself.
    pub(crate) fn for_filter(filter: &Filter) -> Option<&'static Spawner> {
        let s = SPAWNER
            .get_or_init(|| match start(filter) {
                Ok(s) => Some(s),
                Err(e) => {
                    tracing::warn!(error = %e, "no seccomp spawner thread; children attach the filter themselves");
                    None
                }
            })
            .as_ref()?;
        same_program(&s.program, filter.program()).then_some(s)
    }

    /// Runs `f` on the spawner thread and returns its result (`None` if it panicked).
    pub(crate) fn run<R: Send>(&self, f: impl FnOnce() -> R + Send) -> Option<R> {
        let _door = self.door.lock().unwrap_or_else(|e| e.into_inner());
        let mut f = Some(f);
        let mut result: Option<R> = None;
        let mut job = || {
            if let Some(f) = f.take() {
                result = Some(f());
            }
        };
        let job: &mut (dyn FnMut() + Send) = &mut job;
        // SAFETY: erases the lifetime of `job`, which outlives its use: we wait for `done` below
        // before this frame ends, and the spawner drops its pointer before setting `done`.
        let job: *mut (dyn FnMut() + Send + 'static) = unsafe { std::mem::transmute(job) };
        move_to_current_cpu(self.tid);
        let sh = &self.shared;
        let mut st = sh.state.lock().unwrap_or_else(|e| e.into_inner());
        st.job = Some(Job(job));
        st.done = false;
        sh.wake.notify_one();
        while !st.done {
            st = sh.finished.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        drop(st);
        result
    }
}

/// Lets `tid` run only on the CPU the caller runs on now (best effort).
fn move_to_current_cpu(tid: libc::pid_t) {
    // SAFETY: plain syscalls; a zeroed cpu_set_t is an empty set.
    unsafe {
        let cpu = libc::sched_getcpu();
        if cpu < 0 {
            return;
        }
        let mut one: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu as usize, &mut one);
        libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &one);
    }
}

fn start(filter: &Filter) -> std::io::Result<Spawner> {
    let program = filter.program().to_vec();
    let (tx, rx) = std::sync::mpsc::channel::<std::io::Result<libc::pid_t>>();
    let installed = filter.clone();
    let shared = Arc::new(Shared::default());
    let theirs = shared.clone();
    std::thread::Builder::new()
        .name("sandbox-spawner".into())
        .stack_size(256 << 10)
        .spawn(move || {
            // SAFETY: plain syscall on this thread only: block every signal, before the filter
            // goes on as a child would install it.
            unsafe {
                let mut all: libc::sigset_t = std::mem::zeroed();
                libc::sigfillset(&mut all);
                libc::pthread_sigmask(libc::SIG_SETMASK, &all, std::ptr::null_mut());
            }
            // SAFETY: gettid has no preconditions.
            let r = wear_on_this_thread(&installed).map(|()| unsafe { libc::gettid() });
            let ok = r.is_ok();
            let _ = tx.send(r);
            if ok {
                serve(&theirs);
            }
        })?;
    let tid = rx
        .recv()
        .map_err(|_| std::io::Error::other("spawner thread exited during start-up"))??;
    Ok(Spawner {
        program,
        tid,
        shared,
        door: Mutex::new(()),
    })
}

/// The spawner thread's loop: run each job handed over, forever.
fn serve(s: &Shared) {
    let mut st = s.state.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        if let Some(Job(job)) = st.job.take() {
            drop(st);
            // SAFETY: see `Job`: the caller waits for `done`, keeping the closure alive. A panic
            // is caught so the caller is always answered (its result stays `None`).
            let _ = catch_unwind(AssertUnwindSafe(|| unsafe { (*job)() }));
            st = s.state.lock().unwrap_or_else(|e| e.into_inner());
            st.done = true;
            s.finished.notify_one();
            continue;
        }
        st = s.wake.wait(st).unwrap_or_else(|e| e.into_inner());
    }
}
