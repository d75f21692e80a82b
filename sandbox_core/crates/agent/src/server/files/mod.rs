//! File calls, one module per verb: write many files at once, read in chunks, list, remove,
//! stat, make a directory, move, set permissions, find by name, search contents. Blocking
//! syscalls run on tokio's blocking pool; every path goes through `paths` so it stays inside the
//! sandbox, and a walk of a tree goes one directory fd at a time (`walk`), never following a
//! symlink or crossing a mount.

mod describe;
mod find;
mod list;
mod make_dir;
mod moving;
mod op;
mod permissions;
mod read;
mod remove;
mod search;
mod stat;
mod walk;
mod write;

use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use crate::error::AgentError;
use crate::paths::open_beneath;

pub use list::list_dir;
pub use op::file_op;
pub use read::{open_read, read_chunk};
pub use remove::remove;
pub use write::write_files;

/// Total bytes one WriteFiles call may carry (the gRPC message limit also bounds it).
pub const MAX_WRITE_BYTES: u64 = 512 << 20;
pub const DEFAULT_CHUNK: usize = 1 << 20;
pub const MAX_CHUNK: usize = 4 << 20;
/// Most bytes one ReadFile call returns when the caller names no smaller bound.
pub const MAX_READ_BYTES: u64 = 1 << 30;

/// Owner given to files the agent creates, so user programs can change them.
#[derive(Clone, Copy)]
pub struct Owner {
    pub uid: u32,
    pub gid: u32,
}

pub(crate) fn io(context: String) -> impl FnOnce(std::io::Error) -> AgentError {
    move |e| AgentError::io(context, e)
}

/// Refuses anything but a regular file. Checked on the opened descriptor (opened non-blocking, so
/// a FIFO or a device cannot hold the call up), never on the path, which a program can swap.
pub(crate) fn regular(file: &std::fs::File, path: &str) -> Result<std::fs::Metadata, AgentError> {
    let meta = file.metadata().map_err(io(format!("stat {path}")))?;
    let ft = meta.file_type();
    if ft.is_file() {
        return Ok(meta);
    }
    use std::os::unix::fs::FileTypeExt;
    let what = if ft.is_dir() {
        "a directory"
    } else if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_char_device() || ft.is_block_device() {
        "a device"
    } else {
        "not a regular file"
    };
    Err(AgentError::Invalid(format!(
        "{path} is {what}: file calls read and write regular files only"
    )))
}

/// ENXIO from a non-blocking open: a socket, or a FIFO with nobody at its other end.
pub(crate) fn open_error(path: &str, e: std::io::Error) -> AgentError {
    match e.raw_os_error() {
        Some(libc::ENXIO) => AgentError::Invalid(format!(
            "{path} is a socket or a FIFO: file calls read and write regular files only"
        )),
        _ => AgentError::io(format!("open {path}"), e),
    }
}

pub(crate) fn chown_fd(fd: BorrowedFd<'_>, owner: Owner) -> std::io::Result<()> {
    // SAFETY: fchown on a valid fd.
    if unsafe { libc::fchown(fd.as_raw_fd(), owner.uid, owner.gid) } != 0 {
        let e = std::io::Error::last_os_error();
        // Without CAP_CHOWN (agent not root) the files simply stay the agent's.
        if e.raw_os_error() != Some(libc::EPERM) {
            return Err(e);
        }
    }
    Ok(())
}

/// Opens (creating as needed) every directory of `rel`'s parent, beneath `root`.
pub(crate) fn make_parents(root: &OwnedFd, rel: &Path, owner: Owner) -> std::io::Result<()> {
    let Some(parent) = rel.parent() else {
        return Ok(());
    };
    let mut sofar = std::path::PathBuf::new();
    for c in parent.components() {
        match c {
            Component::Normal(name) => {
                let dir = open_beneath(
                    root,
                    if sofar.as_os_str().is_empty() {
                        Path::new(".")
                    } else {
                        &sofar
                    },
                    libc::O_PATH | libc::O_DIRECTORY,
                    0,
                )?;
                let cname = CString::new(std::os::unix::ffi::OsStrExt::as_bytes(name))
                    .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
                // SAFETY: mkdirat on a valid dir fd and C string.
                let rc = unsafe { libc::mkdirat(dir.as_raw_fd(), cname.as_ptr(), 0o755) };
                if rc == 0 {
                    let made = open_beneath(
                        root,
                        &sofar.join(name),
                        libc::O_RDONLY | libc::O_DIRECTORY,
                        0,
                    )?;
                    chown_fd(made.as_fd(), owner)?;
                } else {
                    let e = std::io::Error::last_os_error();
                    if e.raw_os_error() != Some(libc::EEXIST) {
                        return Err(e);
                    }
                }
                sofar.push(name);
            }
            Component::ParentDir => {
                sofar.push("..");
            }
            _ => {}
        }
    }
    Ok(())
}

/// The path naming an open directory fd: with a name joined, the entry of that name in it, looked
/// up from the fd (so nothing before the name can be redirected).
pub(crate) fn fd_path(fd: BorrowedFd<'_>) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

/// `root` joined with `rel`, lexically normal (no `.`, no `..`): the absolute path callers see.
pub(crate) fn absolute(root: &Path, rel: &Path) -> String {
    let mut out = PathBuf::from("/");
    for c in root.join(rel).components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                out.pop();
            }
            _ => {}
        }
    }
    out.to_string_lossy().into_owned()
}

/// `rel` split into the directory it is in and its name (`.` for a root itself).
pub(crate) fn split(rel: &Path) -> (&Path, &std::ffi::OsStr) {
    match rel.file_name() {
        Some(name) => (
            rel.parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new(".")),
            name,
        ),
        None => (Path::new("."), std::ffi::OsStr::new(".")),
    }
}

/// A C string of a name or path.
pub(crate) fn c_name(name: &std::ffi::OsStr) -> std::io::Result<CString> {
    CString::new(std::os::unix::ffi::OsStrExt::as_bytes(name))
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))
}

/// The directory `rel` (beneath `root`) is in, opened to act on its entries.
pub(crate) fn open_parent(root: &OwnedFd, rel: &Path, what: &str) -> Result<OwnedFd, AgentError> {
    open_beneath(root, split(rel).0, libc::O_PATH | libc::O_DIRECTORY, 0)
        .map_err(io(format!("open the directory of {what}")))
}
