//! ReadFile: a regular file's bytes, in chunks, bounded before any byte is read.

use super::{open_error, regular, MAX_READ_BYTES};
use crate::error::AgentError;
use crate::paths::{open_beneath, open_root, Roots};

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
