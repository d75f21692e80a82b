//! Remove: a file, or a directory (recursively when asked); never a root.

use std::os::fd::AsRawFd;
use std::path::Path;

use super::io;
use crate::error::AgentError;
use crate::paths::{open_beneath, open_root, Roots};

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
