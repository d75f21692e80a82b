//! The fd helpers every crate shares: a close-on-exec pipe, and an fd moved above a bound (out of
//! the way of the descriptors a child is about to have placed at 0, 1, 2, ...).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// A pipe, both ends close-on-exec and blocking: (read end, write end).
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 into a valid out-array of two.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both fds were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// `fd` itself when it is `lowest` or above, else a close-on-exec duplicate at `lowest` or
/// above (the original is closed).
pub fn at_least(fd: OwnedFd, lowest: RawFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() >= lowest {
        return Ok(fd);
    }
    // SAFETY: plain syscall on an fd we own.
    let new = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, lowest) };
    if new < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `new` was just created by fcntl.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pipe_is_close_on_exec_and_an_fd_moves_above_its_bound() {
        let (r, w) = pipe().unwrap();
        for fd in [&r, &w] {
            // SAFETY: plain syscall on an fd we own.
            let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFD) };
            assert_eq!(flags & libc::FD_CLOEXEC, libc::FD_CLOEXEC);
        }
        let raw = r.as_raw_fd();
        let moved = at_least(r, raw + 100).unwrap();
        assert!(moved.as_raw_fd() >= raw + 100);
        let kept = moved.as_raw_fd();
        assert_eq!(at_least(moved, 3).unwrap().as_raw_fd(), kept);
    }
}
