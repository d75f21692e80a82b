//! Pseudo-terminals: a program given a terminal instead of pipes (`Command::terminal`).
//!
//! The agent opens a fresh pair from the `/dev/ptmx` of its own mount namespace (the sandbox's
//! devpts instance), keeps the master and gives the child the other end as fds 0, 1 and 2. The
//! child makes it its controlling terminal right after its `setsid`, so a shell has job control,
//! the line discipline turns Ctrl-C into SIGINT of the foreground process group, and a resize of
//! the master reaches that group as SIGWINCH. The other end is opened from the master
//! (`TIOCGPTPEER`), never by a path a program could have changed. Everything the program writes
//! comes back on the master, stdout and stderr merged, as a terminal shows them.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// Rows and columns of a terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TerminalSize {
    pub rows: u16,
    pub cols: u16,
}

impl TerminalSize {
    /// A size a terminal can have: both sides at least 1.
    pub fn validate(self) -> Result<Self, String> {
        if self.rows == 0 || self.cols == 0 {
            return Err(format!(
                "a terminal needs at least one row and one column, got {}x{}",
                self.rows, self.cols
            ));
        }
        Ok(self)
    }
}

/// A terminal's two ends: the agent's (`master`) and the program's.
pub(crate) struct Pair {
    pub master: OwnedFd,
    pub program: OwnedFd,
}

/// A new terminal of `size`; its master is non-blocking (the agent reads it asynchronously).
pub(crate) fn open(size: TerminalSize) -> io::Result<Pair> {
    // SAFETY: plain syscalls on fds this function owns.
    unsafe {
        let fd = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let master = OwnedFd::from_raw_fd(fd);
        if libc::unlockpt(master.as_raw_fd()) != 0 {
            return Err(io::Error::last_os_error());
        }
        let peer = libc::ioctl(
            master.as_raw_fd(),
            libc::TIOCGPTPEER,
            libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
        );
        if peer < 0 {
            return Err(io::Error::last_os_error());
        }
        let program = OwnedFd::from_raw_fd(peer);
        resize(&master, size)?;
        crate::spawn::nonblocking(&master)?;
        Ok(Pair { master, program })
    }
}

/// Gives the terminal of `master` a new size; the kernel signals SIGWINCH to its foreground
/// process group when the size changed.
pub fn resize(master: &impl AsRawFd, size: TerminalSize) -> io::Result<()> {
    let ws = libc::winsize {
        ws_row: size.rows,
        ws_col: size.cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads a `winsize` that lives across the call.
    if unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCSWINSZ, &ws) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
