//! A sandbox's Python zygote made from a template's instead of started: the manager keeps a
//! prewarmed interpreter outside every sandbox (`zygote.py`, its template role), and
//! the agent, which holds a connection to it, asks it for a fork that enters this sandbox and
//! serves as its zygote. What the new zygote does between the fork and serving is what a spawned
//! program does between clone and exec (`spawn.rs`), done by itself: the same cgroup, session,
//! rlimits, cwd, user namespace, groups and ids, no capability that exec would not have left it,
//! `no_new_privs`, the programs' seccomp filter, its stdio and control socket as fds 0-3 and
//! nothing else, the zygote's environment. It ends up a child of the agent (which is pid 1 of the
//! sandbox's pid namespace), adopted like a zygote's worker, and is supervised, limited and killed
//! exactly as a spawned zygote. A sandbox's first Python execution is made the same way, and then
//! takes a worker's steps and runs in place of serving (`make_program`): one fork and exit of the
//! interpreter fewer than a zygote and its worker, for a sandbox that runs Python once.
//!
//! The template never reads a request: per zygote the agent sends it one datagram carrying a
//! socket of the request's own and the agent's pid namespace, the template forks into that
//! namespace, and the new process alone reads the request (the sandbox's environment, its ids,
//! its namespaces) from the socket. So no sandbox's data lives in the template, whose memory
//! every later sandbox of the template starts from.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use crate::error::{SpawnError, Step};
use crate::limits::Limits;
use crate::reaper::Reaper;
use crate::spawn::{Isolation, Prepared, Spawned};

/// The namespaces the new zygote enters, in `zygote.py`'s `NS_ORDER` and then cgroup: all the
/// agent's own but its user namespace (the programs' is sent apart).
const NAMESPACES: [&str; 6] = ["net", "ipc", "uts", "pid", "mnt", "cgroup"];
/// The pid namespace's place in `NAMESPACES`: the template forks into it.
const PID_NS: usize = 3;

pub(crate) struct Template {
    /// The connection to the template process.
    conn: OwnedFd,
    /// This process's namespaces in `NAMESPACES` order, opened when the template was given.
    namespaces: Vec<OwnedFd>,
}

impl Template {
    /// `conn`: a connected SOCK_SEQPACKET socket to a template process.
    pub(crate) fn new(conn: OwnedFd) -> io::Result<Template> {
        // An inherited connection: no program may inherit it in turn.
        // SAFETY: plain syscall on an fd we own.
        if unsafe { libc::fcntl(conn.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let namespaces = NAMESPACES
            .iter()
            .map(|ns| std::fs::File::open(format!("/proc/self/ns/{ns}")).map(OwnedFd::from))
            .collect::<io::Result<Vec<_>>>()?;
        Ok(Template { conn, namespaces })
    }

    /// The zygote (`prep`, `limits`, `iso` as `spawn::spawn` takes them, `iso.fd3` its control
    /// socket) made from the template: what `spawn::spawn` returns for a spawned one.
    pub(crate) fn make_zygote(
        &self,
        prep: &Prepared,
        limits: &Limits,
        iso: &Isolation<'_>,
        reaper: &Reaper,
    ) -> Result<Spawned, SpawnError> {
        let Some(fd3) = iso.fd3 else {
            return Err(SpawnError::Invalid(
                "a zygote made from a template needs its control socket".into(),
            ));
        };
        let made = self.make(prep, limits, iso, fd3, None, reaper)?;
        Ok(Spawned::of(
            made.child,
            made.stdin,
            made.stdout,
            made.stderr,
            None,
        ))
    }

    /// The program `prep` (a Python execution the zygote would serve, `run` its worker request,
    /// `zygote::request_json` with no join file) made from the template: a process that takes
    /// every step of a zygote's start and then of a worker's, and runs the program in place of
    /// serving. Returned once it reported like a worker, released to run.
    pub(crate) fn make_program(
        &self,
        prep: &Prepared,
        limits: &Limits,
        iso: &Isolation<'_>,
        run: &str,
        reaper: &Reaper,
    ) -> Result<Spawned, SpawnError> {
        use crate::spawn::pipe;
        let fail = |step| move |source| SpawnError::Isolation { step, source };
        let (ours, theirs) = crate::zygote::socketpair().map_err(fail(Step::Fork))?;
        crate::zygote::set_timeouts(&ours).map_err(fail(Step::Fork))?;
        let (go_r, go_w) = pipe().map_err(fail(Step::Pipe))?;
        let mut run_fds = vec![go_r.as_raw_fd()];
        run_fds.extend(iso.landlock);
        let made = self.make(
            prep,
            limits,
            iso,
            theirs.as_raw_fd(),
            Some((run, &run_fds)),
            reaper,
        )?;
        // Only the program holds these now: its death is seen on the socket.
        drop((theirs, go_r));
        let child = crate::zygote::accept_program(&ours, made.child, go_w, reaper)?;
        Ok(Spawned::of(
            child,
            made.stdin,
            made.stdout,
            made.stderr,
            None,
        ))
    }

    /// A process made from the template with `fd3` as its control socket: a zygote, or with
    /// `run` (a worker request and its fds: `go`, then the Landlock ruleset if any) a program.
    fn make(
        &self,
        prep: &Prepared,
        limits: &Limits,
        iso: &Isolation<'_>,
        fd3: RawFd,
        run: Option<(&str, &[RawFd])>,
        reaper: &Reaper,
    ) -> Result<Made, SpawnError> {
        use crate::spawn::{nonblocking, pipe};
        let fail = |step| move |source| SpawnError::Isolation { step, source };
        // It leaves the template's cgroup for one of the sandbox's: without one it would stay
        // outside the sandbox's limits.
        let (Some(uid), Some(gid), Some(userns), Some(cgroup)) = (
            iso.identity.uid,
            iso.identity.gid,
            iso.identity.userns,
            iso.cgroup,
        ) else {
            return Err(SpawnError::Invalid(
                "a process made from a template needs the programs' user namespace, ids and a cgroup"
                    .into(),
            ));
        };
        let (stdin_r, stdin_w) = pipe().map_err(fail(Step::Pipe))?;
        let (stdout_r, stdout_w) = pipe().map_err(fail(Step::Pipe))?;
        let (stderr_r, stderr_w) = pipe().map_err(fail(Step::Pipe))?;
        nonblocking(&stdout_r).map_err(fail(Step::Pipe))?;
        nonblocking(&stderr_r).map_err(fail(Step::Pipe))?;
        let joins = cgroup.join_files()?;
        let (ours, theirs) = crate::zygote::socketpair().map_err(fail(Step::Fork))?;
        crate::zygote::set_timeouts(&ours).map_err(fail(Step::Fork))?;
        let mut json = request_json(prep, limits, iso, uid, gid);
        let mut fds = vec![
            stdin_r.as_raw_fd(),
            stdout_w.as_raw_fd(),
            stderr_w.as_raw_fd(),
            fd3,
        ];
        fds.extend(self.namespaces.iter().map(AsRawFd::as_raw_fd));
        fds.push(userns);
        fds.extend(joins.raw());
        if let Some((request, run_fds)) = run {
            json.pop(); // its closing brace
            json.push_str(",\"run\":");
            crate::zygote::json_str(&mut json, request);
            json.push_str(&format!(",\"run_fds\":{}}}", run_fds.len()));
            fds.extend(run_fds);
        }
        // From here until the process is registered, the reaper must not reap it as an orphan.
        let adoption = reaper.begin_adopt();
        let pid_ns = self.namespaces[PID_NS].as_raw_fd();
        crate::zygote::send_with_fds(&self.conn, b"z", &[theirs.as_raw_fd(), pid_ns])
            .map_err(fail(Step::Fork))?;
        drop(theirs);
        crate::zygote::send_with_fds(&ours, json.as_bytes(), &fds).map_err(fail(Step::Fork))?;
        drop((stdin_r, stdout_w, stderr_w, joins));
        let reply = crate::zygote::recv_text(&ours, 0).map_err(fail(Step::Fork))?;
        let Some(pid) = crate::zygote::parse_pid(&reply) else {
            return Err(SpawnError::Isolation {
                step: Step::Fork,
                source: io::Error::other(format!("the template said {reply:?}")),
            });
        };
        // The new process answers once the middle one exited: it is our child now.
        let child = adoption.adopt(pid).map_err(fail(Step::Fork))?;
        Ok(Made {
            child,
            stdin: stdin_w,
            stdout: stdout_r,
            stderr: stderr_r,
        })
    }
}

/// A process the template made, and the agent's ends of its stdio.
struct Made {
    child: crate::reaper::Child,
    stdin: OwnedFd,
    stdout: OwnedFd,
    stderr: OwnedFd,
}

/// The request the process the template makes reads (see `zygote.py`'s template role).
fn request_json(
    prep: &Prepared,
    limits: &Limits,
    iso: &Isolation<'_>,
    uid: libc::uid_t,
    gid: libc::gid_t,
) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(4096);
    let _ = write!(s, "{{\"uid\":{uid},\"gid\":{gid},\"groups\":[");
    let groups = iso
        .identity
        .groups
        .map(|g| g.ids().to_vec())
        .unwrap_or_default();
    for (i, g) in groups.iter().enumerate() {
        let _ = write!(s, "{}{g}", if i > 0 { "," } else { "" });
    }
    s.push_str("],\"rlimits\":");
    crate::zygote::rlimits_json(&mut s, &crate::spawn::rlimits(limits, iso));
    s.push_str(",\"cwd\":");
    crate::zygote::json_str(&mut s, &String::from_utf8_lossy(prep.cwd.as_bytes()));
    s.push_str(",\"env\":{");
    let mut first = true;
    for e in &prep.env {
        let e = String::from_utf8_lossy(e.as_bytes());
        if let Some((k, v)) = e.split_once('=') {
            if !first {
                s.push(',');
            }
            first = false;
            crate::zygote::json_str(&mut s, k);
            s.push(':');
            crate::zygote::json_str(&mut s, v);
        }
    }
    s.push_str("},\"seccomp\":");
    match iso.seccomp {
        Some(f) => crate::zygote::json_str(&mut s, &f.hex()),
        None => s.push_str("null"),
    }
    s.push('}');
    s
}

/// The command line of a template process of `python` whose zygotes run the agent's `prelude`
/// (the one `Executor::enable_python_zygote` is given), serving on its fd `listen_fd`, a listening
/// SOCK_SEQPACKET socket, until the other end of its fd `retire_fd`, a pipe's read end, is closed
/// and its last connection after that. It says `ready` on its stdout once it serves, needs an
/// empty environment (its zygotes set theirs) and dies with its parent.
pub fn command(python: &str, prelude: &str, listen_fd: i32, retire_fd: i32) -> Vec<String> {
    let (listen, retire) = (listen_fd.to_string(), retire_fd.to_string());
    [
        python,
        "-I",
        "-c",
        crate::zygote::SOURCE,
        prelude,
        "template",
        &listen,
        &retire,
    ]
    .map(String::from)
    .to_vec()
}

/// A connected SOCK_SEQPACKET socket to the template listening at `path`.
pub fn connect(path: &std::path::Path) -> io::Result<OwnedFd> {
    use std::os::unix::ffi::OsStrExt;
    // SAFETY: plain syscall.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: just created, owned by nobody else.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: a zeroed sockaddr_un is valid.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = path.as_os_str().as_bytes();
    if bytes.len() >= addr.sun_path.len() {
        return Err(io::Error::other("template socket path too long"));
    }
    for (d, s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    // SAFETY: `addr` is a valid sockaddr_un of the given size.
    let r = unsafe {
        libc::connect(
            sock.as_raw_fd(),
            (&addr as *const libc::sockaddr_un).cast(),
            std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(sock)
}
