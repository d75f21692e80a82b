//! WriteFiles: many files in one call, every path checked before any file is written.

use std::io::Write;
use std::os::fd::{AsFd, AsRawFd};

use sandbox_proto as pb;

use super::{chown_fd, io, make_parents, open_error, regular, Owner, MAX_WRITE_BYTES};
use crate::error::AgentError;
use crate::paths::{open_beneath, open_root, Roots};

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
