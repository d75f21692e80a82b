//! Where the agent listens: an inherited unix socket (local launcher), a unix path (docker), or
//! TCP (kubernetes, where the manager dials the pod IP).

use std::os::fd::FromRawFd;
use std::os::unix::fs::PermissionsExt;

use tokio_stream::wrappers::{TcpListenerStream, UnixListenerStream};

pub enum Listener {
    Unix(UnixListenerStream),
    Tcp(TcpListenerStream),
}

fn set_cloexec(fd: i32) {
    // SAFETY: fcntl on an fd we own; user programs must never inherit the control socket.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFD);
        if flags >= 0 {
            libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
        }
    }
}

pub fn from_fd(fd: i32) -> std::io::Result<Listener> {
    set_cloexec(fd);
    // SAFETY: the launcher handed us this fd: a bound, listening unix socket we now own.
    from_std(unsafe { std::os::unix::net::UnixListener::from_raw_fd(fd) })
}

/// A unix socket already bound (`from_fd`, `serve`), served from here on. Needs the runtime.
pub fn from_std(l: std::os::unix::net::UnixListener) -> std::io::Result<Listener> {
    l.set_nonblocking(true)?;
    Ok(Listener::Unix(UnixListenerStream::new(
        tokio::net::UnixListener::from_std(l)?,
    )))
}

/// Binds `path` (close-on-exec, 0600: only the agent's own uid, the manager side, may connect).
fn bind_unix(path: &str) -> std::io::Result<std::os::unix::net::UnixListener> {
    let _ = std::fs::remove_file(path);
    let l = std::os::unix::net::UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(l)
}

/// A socket bound from `--listen`, before the agent leaves the namespaces it was started in:
/// a unix path is bound before the new root hides its directory (docker), a TCP address before
/// an allow-list sandbox moves the agent to a network namespace of its own (kubernetes, whose
/// manager dials the pod's address).
pub enum Bound {
    Unix(std::os::unix::net::UnixListener),
    Tcp(std::net::TcpListener),
}

pub fn bind(spec: &str) -> std::io::Result<Bound> {
    if let Some(path) = spec.strip_prefix("unix:") {
        bind_unix(path).map(Bound::Unix)
    } else if let Some(addr) = spec.strip_prefix("tcp:") {
        // Rust's std sockets are close-on-exec: programs never inherit the listener.
        std::net::TcpListener::bind(addr).map(Bound::Tcp)
    } else {
        Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("listen spec must be unix:PATH or tcp:ADDR, got {spec}"),
        ))
    }
}

/// Serves a bound socket (needs the runtime).
pub fn serve(bound: Bound) -> std::io::Result<Listener> {
    match bound {
        Bound::Unix(l) => from_std(l),
        Bound::Tcp(l) => {
            l.set_nonblocking(true)?;
            Ok(Listener::Tcp(TcpListenerStream::new(
                tokio::net::TcpListener::from_std(l)?,
            )))
        }
    }
}
