//! The user namespace programs of a root sandbox run in: ids 0..65536 inside are the host's
//! `base..base+65536`, a range no other sandbox has (the launcher allocates it); or, for an agent
//! that is root of a user-namespaced pod (`create_in_pod`), ids 0..65535 of the pod's own, the
//! one left (`AGENT_ID`) being the agent's. Root inside has capabilities only over what that
//! namespace owns: the mount, pid, network and cgroup namespaces belong to the host's user
//! namespace, so a program that is root inside still cannot mount, trace the agent, open raw
//! sockets or load modules. For a local sandbox memory snapshots are restored into, the launcher
//! makes it itself (`adopt`), and there it owns the sandbox's pid namespace, so that restored
//! programs can be given their pids (the launcher's `programs_ns` says what root inside gains by
//! it).
//!
//! Otherwise it is made once, before the agent starts any thread: a forked child takes the sandbox's own root id
//! (so that id, not the host's root, owns the namespace), unshares its user namespace, sends the
//! agent an fd of it (over a socket pair: opening another uid's `/proc/<pid>/ns/user` would need
//! CAP_SYS_PTRACE, which a container's agent does not have) and waits; the agent (root on the
//! host) writes the child's id maps, keeps the fd and ends the child. The namespace lives as long
//! as the fd, i.e. as the agent.

use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::error::SetupError;

/// Ids of one sandbox's range.
pub const RANGE: u32 = 65_536;

fn err(what: &'static str) -> impl FnOnce(std::io::Error) -> SetupError {
    move |source| SetupError::UserNs { what, source }
}

/// The id of a user-namespaced pod that no program has (`create_in_pod`): the agent takes it.
pub const AGENT_ID: u32 = RANGE - 1;

/// A new user namespace whose ids 0..RANGE map to the host's `base..base+RANGE`.
pub fn create(base: u32) -> Result<OwnedFd, SetupError> {
    if base == 0 || base.checked_add(RANGE).is_none() {
        return Err(SetupError::UserNs {
            what: "id range",
            source: std::io::Error::from_raw_os_error(libc::EINVAL),
        });
    }
    make(base, &format!("0 {base} {RANGE}\n"))
}

/// A new user namespace inside a pod's own (whose ids are 0..RANGE): its ids 0..AGENT_ID are the
/// same ids of the pod's, so the image's files, owned by the pod's root, are root's inside
/// without an idmap (which a pod cannot make of its root file system), and `AGENT_ID` is in no
/// program's reach.
pub fn create_in_pod() -> Result<OwnedFd, SetupError> {
    make(0, &format!("0 0 {AGENT_ID}\n"))
}

/// A user namespace made for the agent (the local launcher's, which owns the agent's pid
/// namespace), inherited at `fd`: moved where the executor uses it.
pub fn adopt(fd: std::os::fd::RawFd) -> Result<OwnedFd, SetupError> {
    // SAFETY: the fd was handed over to this process, which owns it from here on.
    let inherited = unsafe { OwnedFd::from_raw_fd(fd) };
    place(&inherited)
}

/// `ns` moved where the executor uses it (the fd the seccomp filter lets `setns` take): placed
/// while the agent has one thread, since growing the fd table later, with threads, waits for an
/// RCU grace period (~10 ms here).
fn place(ns: &OwnedFd) -> Result<OwnedFd, SetupError> {
    let at = crate::seccomp::USERNS_FD;
    // SAFETY: fcntl on a valid fd; the result, when valid, is ours.
    let fd = unsafe { libc::fcntl(ns.as_raw_fd(), libc::F_DUPFD_CLOEXEC, at) };
    if fd < 0 {
        return Err(err("place ns fd")(std::io::Error::last_os_error()));
    }
    // SAFETY: just returned by fcntl.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A new user namespace owned by id `base` (which the child making it takes), with `map` as
/// both its uid and gid maps.
fn make(base: u32, map: &str) -> Result<OwnedFd, SetupError> {
    let (unshared_r, unshared_w) =
        crate::fdpass::socket_pair(libc::SOCK_DGRAM).map_err(err("socketpair"))?;
    let (done_r, mut done_w) = pipe().map_err(err("pipe"))?;
    // SAFETY: the agent has no thread yet; the child only makes raw syscalls and exits.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(err("fork")(std::io::Error::last_os_error()));
    }
    if pid == 0 {
        // The agent runs before its own /proc is mounted: /proc is the host's, where the child
        // has another pid than `pid`. It says which, read from the host's /proc/self.
        let mut msg = [0u8; MSG_LEN];
        // SAFETY: async-signal-safe syscalls only, then _exit.
        unsafe {
            // The namespace's owner is whoever makes it: the sandbox's own root id, not the
            // agent's host root. The kernel charges per-user counts (inotify instances, user
            // namespaces, message queues ...) to the owner at every level up, so they stay the
            // sandbox's own.
            let dropped = libc::setgroups(0, std::ptr::null()) == 0
                && libc::setresgid(base, base, base) == 0
                && libc::setresuid(base, base, base) == 0;
            let mut ns = -1;
            if dropped && libc::unshare(libc::CLONE_NEWUSER) == 0 {
                ns = libc::open(
                    c"/proc/self/ns/user".as_ptr(),
                    libc::O_RDONLY | libc::O_CLOEXEC,
                );
                if ns >= 0 {
                    msg[0] = b'1';
                    libc::readlink(c"/proc/self".as_ptr(), msg[1..].as_mut_ptr().cast(), 15);
                }
            }
            crate::fdpass::send_with_fd(unshared_w.as_raw_fd(), &msg, ns);
            let mut b = 0u8;
            libc::read(done_r.as_raw_fd(), (&mut b as *mut u8).cast(), 1);
            libc::_exit(0);
        }
    }
    drop((unshared_w, done_r));
    let result = (|| {
        let mut msg = [0u8; MSG_LEN];
        let (n, ns) = crate::fdpass::recv_with_fd(&unshared_r, &mut msg).map_err(err("unshare"))?;
        if n != MSG_LEN {
            return Err(err("unshare")(std::io::Error::from_raw_os_error(
                libc::EPIPE,
            )));
        }
        let host_pid = std::str::from_utf8(&msg[1..])
            .ok()
            .and_then(|s| s.trim_end_matches('\0').parse::<u32>().ok());
        let (b'1', Some(host_pid), Some(ns)) = (msg[0], host_pid, ns) else {
            return Err(err("unshare")(std::io::Error::from_raw_os_error(
                libc::EPERM,
            )));
        };
        let proc = format!("/proc/{host_pid}");
        std::fs::write(format!("{proc}/uid_map"), map).map_err(err("uid_map"))?;
        std::fs::write(format!("{proc}/gid_map"), map).map_err(err("gid_map"))?;
        place(&ns)
    })();
    let _ = done_w.write_all(b"x");
    drop(done_w);
    let mut status = 0;
    // SAFETY: reaping our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    result
}

const MSG_LEN: usize = 16;

fn pipe() -> std::io::Result<(std::fs::File, std::fs::File)> {
    let (r, w) = crate::fds::pipe()?;
    Ok((r.into(), w.into()))
}
