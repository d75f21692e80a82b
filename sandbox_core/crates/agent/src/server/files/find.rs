//! Find: the paths under a directory whose name matches a glob (`find PATH -name PATTERN`).

use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::AtomicBool;

use super::walk::{Next, Walk};
use super::{absolute, c_name, io, split};
use crate::error::AgentError;
use crate::paths::{open_beneath, open_root, Roots};

/// Most paths one find answers.
pub const MAX_PATHS: usize = 100_000;
/// A find descends through the whole tree; this only bounds a pathological one.
const MAX_DEPTH: u32 = 4096;

fn matches(pattern: &std::ffi::CStr, name: &std::ffi::OsStr) -> bool {
    let Ok(name) = std::ffi::CString::new(name.as_bytes()) else {
        return false;
    };
    // SAFETY: fnmatch on two valid C strings.
    unsafe { libc::fnmatch(pattern.as_ptr(), name.as_ptr(), 0) == 0 }
}

pub fn find(
    roots: &Roots,
    path: &str,
    pattern: &str,
    cancel: &AtomicBool,
) -> Result<Vec<String>, AgentError> {
    if pattern.is_empty() {
        return Err(AgentError::Invalid("pattern is required".into()));
    }
    let glob =
        c_name(pattern.as_ref()).map_err(|_| AgentError::Invalid("pattern contains NUL".into()))?;
    let r = roots.resolve(path)?;
    let root = open_root(&r.root)?;
    let base = absolute(&r.root, &r.rel);
    let mut found = Vec::new();
    // The start itself is tested too, as find does.
    let start = open_beneath(&root, &r.rel, libc::O_PATH, 0).map_err(io(format!("open {path}")))?;
    let name = std::path::Path::new(&base)
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_else(|| split(&r.rel).1.to_os_string());
    if matches(&glob, &name) {
        found.push(base.clone());
    }
    drop(start);
    let Ok(dir) = open_beneath(
        &root,
        &r.rel,
        libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
        0,
    ) else {
        return Ok(found); // a file, or a symlink: nothing beneath it
    };
    let walk = Walk {
        cancel,
        max_depth: MAX_DEPTH,
    };
    walk.run(&dir, &mut |e| {
        if matches(&glob, &e.name) {
            if found.len() == MAX_PATHS {
                return Err(AgentError::TooLarge(format!(
                    "{path}: more than {MAX_PATHS} names match {pattern:?}"
                )));
            }
            found.push(absolute(std::path::Path::new(&base), &e.rel));
        }
        Ok(Next::Go)
    })?;
    Ok(found)
}
