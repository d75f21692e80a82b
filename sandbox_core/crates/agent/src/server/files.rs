//! File calls: write many files at once, read in chunks, list, remove. Blocking syscalls run on
//! tokio's blocking pool; every path goes through `paths` so it stays inside the sandbox.

use std::ffi::CString;
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path};

use sandbox_proto as pb;

use crate::error::AgentError;
use crate::paths::{open_beneath, open_root, Roots};

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

fn io(context: String) -> impl FnOnce(std::io::Error) -> AgentError {
    move |e| AgentError::io(context, e)
}

/// Refuses anything but a regular file. Checked on the opened descriptor (opened non-blocking, so
/// a FIFO or a device cannot hold the call up), never on the path, which a program can swap.
fn regular(file: &std::fs::File, path: &str) -> Result<std::fs::Metadata, AgentError> {
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
fn open_error(path: &str, e: std::io::Error) -> AgentError {
    match e.raw_os_error() {
        Some(libc::ENXIO) => AgentError::Invalid(format!(
            "{path} is a socket or a FIFO: file calls read and write regular files only"
        )),
        _ => AgentError::io(format!("open {path}"), e),
    }
}

fn chown_fd(fd: BorrowedFd<'_>, owner: Owner) -> std::io::Result<()> {
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
fn make_parents(root: &OwnedFd, rel: &Path, owner: Owner) -> std::io::Result<()> {
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

pub fn write_files(
    roots: &Roots,
    owner: Owner,
    files: Vec<pb::FileEntry>,
) -> Result<u64, AgentError> {
    let total: u64 = files.iter().map(|f| f.data.len() as u64).sum();
    if total > MAX_WRITE_BYTES {
        return Err(AgentError::TooLarge(format!(
            "{total} bytes in one write (max {MAX_WRITE_BYTES})"
        )));
    }
    // Validate every path before writing any file: a bad entry must not leave half a batch.
    let resolved = files
        .iter()
        .map(|f| {
            if f.mode > 0o7777 {
                return Err(AgentError::Invalid(format!(
                    "{}: mode {:o} is not a permission mode",
                    f.path, f.mode
                )));
            }
            roots.resolve(&f.path)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut written = 0u64;
    for (f, r) in files.iter().zip(resolved) {
        let root = open_root(&r.root)?;
        make_parents(&root, &r.rel, owner)
            .map_err(io(format!("create parent dirs of {}", f.path)))?;
        let mode = if f.mode == 0 { 0o644 } else { f.mode };
        // O_NONBLOCK: a FIFO without a reader fails at once (ENXIO) instead of blocking; with
        // one it opens and is refused below. O_TRUNC only ever truncates a regular file.
        let fd = open_beneath(
            &root,
            &r.rel,
            libc::O_WRONLY
                | libc::O_CREAT
                | libc::O_TRUNC
                | libc::O_NOFOLLOW
                | libc::O_NONBLOCK
                | libc::O_NOCTTY,
            mode,
        )
        .map_err(|e| open_error(&f.path, e))?;
        let mut file = std::fs::File::from(fd);
        regular(&file, &f.path)?;
        chown_fd(file.as_fd(), owner).map_err(io(format!("chown {}", f.path)))?;
        // SAFETY: fchmod on a valid fd; the mode was validated above.
        unsafe { libc::fchmod(file.as_raw_fd(), mode) };
        file.write_all(&f.data)
            .map_err(io(format!("write {}", f.path)))?;
        written += f.data.len() as u64;
    }
    Ok(written)
}

/// What one ReadFile call reads: `len` bytes of `file` from `offset`; `size` is the file's size.
pub struct ReadPlan {
    pub file: std::fs::File,
    pub size: u64,
    pub offset: u64,
    pub len: u64,
}

/// Opens a regular file for reading `length` bytes from `offset` (0: to the end), refusing a
/// read of more than `max_bytes` (0: `MAX_READ_BYTES`) before any byte is read.
pub fn open_read(
    roots: &Roots,
    path: &str,
    offset: u64,
    length: u64,
    max_bytes: u64,
) -> Result<ReadPlan, AgentError> {
    let r = roots.resolve(path)?;
    let root = open_root(&r.root)?;
    let fd = open_beneath(
        &root,
        &r.rel,
        libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY,
        0,
    )
    .map_err(|e| open_error(path, e))?;
    let file = std::fs::File::from(fd);
    let size = regular(&file, path)?.len();
    let max = match max_bytes {
        0 => MAX_READ_BYTES,
        n => n.min(MAX_READ_BYTES),
    };
    let rest = size.saturating_sub(offset);
    let len = if length == 0 { rest } else { length.min(rest) };
    if len > max {
        return Err(AgentError::TooLarge(format!(
            "{path}: reading {len} bytes is more than the limit of {max} \
             (raise the limit, or read the file in parts with offset and length)"
        )));
    }
    Ok(ReadPlan {
        file,
        size,
        offset,
        len,
    })
}

/// Up to `size` bytes at `offset`; fewer only at the end of the file.
pub fn read_chunk(file: &std::fs::File, offset: u64, size: usize) -> Result<Vec<u8>, AgentError> {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; size];
    let mut filled = 0;
    while filled < size {
        match file.read_at(&mut buf[filled..], offset + filled as u64) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(AgentError::io("read", e)),
        }
    }
    buf.truncate(filled);
    Ok(buf)
}

pub fn list_dir(roots: &Roots, path: &str) -> Result<Vec<pb::DirEntry>, AgentError> {
    let r = roots.resolve(if path.is_empty() { "." } else { path })?;
    let root = open_root(&r.root)?;
    let dir = open_beneath(&root, &r.rel, libc::O_RDONLY | libc::O_DIRECTORY, 0)
        .map_err(io(format!("open {path}")))?;
    // /proc/self/fd/N names the directory we opened safely; read_dir then cannot be redirected.
    let mut entries = Vec::new();
    let iter = std::fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd()))
        .map_err(io(format!("list {path}")))?;
    for e in iter {
        let e = e.map_err(io(format!("list {path}")))?;
        let meta = match e.metadata() {
            Ok(m) => m,
            Err(_) => continue, // removed while listing
        };
        use std::os::unix::fs::PermissionsExt;
        entries.push(pb::DirEntry {
            name: e.file_name().to_string_lossy().into_owned(),
            is_dir: meta.is_dir(),
            size: meta.len(),
            mode: meta.permissions().mode() & 0o7777,
            is_symlink: meta.file_type().is_symlink(),
        });
    }
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(entries)
}

pub fn remove(roots: &Roots, path: &str, recursive: bool) -> Result<(), AgentError> {
    let r = roots.resolve(path)?;
    if r.rel == Path::new(".") {
        return Err(AgentError::Invalid(format!(
            "{path}: refusing to remove a sandbox root"
        )));
    }
    let name = r
        .rel
        .file_name()
        .ok_or_else(|| AgentError::Invalid(format!("{path}: no file name")))?;
    let parent = r
        .rel
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let root = open_root(&r.root)?;
    let dir = open_beneath(&root, parent, libc::O_RDONLY | libc::O_DIRECTORY, 0)
        .map_err(io(format!("open parent of {path}")))?;
    let target = Path::new(&format!("/proc/self/fd/{}", dir.as_raw_fd())).join(name);
    let meta = std::fs::symlink_metadata(&target).map_err(io(format!("stat {path}")))?;
    let result = if meta.is_dir() {
        if recursive {
            std::fs::remove_dir_all(&target)
        } else {
            std::fs::remove_dir(&target)
        }
    } else {
        std::fs::remove_file(&target)
    };
    result.map_err(io(format!("remove {path}")))
}
