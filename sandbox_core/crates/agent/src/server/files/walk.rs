//! A walk of a tree beneath an open directory: one directory fd at a time, names in order,
//! never following a symlink (`O_NOFOLLOW`) or crossing into another mount (`paths`'
//! `RESOLVE_NO_XDEV`), stopped when its caller goes away.

use std::ffi::OsString;
use std::fs::Metadata;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use super::{fd_path, io};
use crate::error::AgentError;
use crate::paths::open_beneath;

/// One entry met by a walk.
pub struct Entry<'a> {
    /// The directory it is in.
    pub dir: &'a OwnedFd,
    /// Its path below the walk's start.
    pub rel: PathBuf,
    pub name: OsString,
    /// Not followed: a symlink is described as one.
    pub meta: Metadata,
}

/// What a visit wants next.
pub enum Next {
    Go,
    Stop,
}

pub struct Walk<'a> {
    /// Set when the call's caller is gone: the walk ends with `Cancelled`.
    pub cancel: &'a AtomicBool,
    /// Levels below the start that are visited (1: the start's entries only).
    pub max_depth: u32,
}

impl Walk<'_> {
    /// Visits every entry beneath `dir` (not `dir` itself), a directory's entries right after it.
    /// A directory that cannot be opened (another mount, removed meanwhile) is visited but not
    /// entered.
    pub fn run(
        &self,
        dir: &OwnedFd,
        visit: &mut dyn FnMut(&Entry<'_>) -> Result<Next, AgentError>,
    ) -> Result<(), AgentError> {
        self.level(dir, Path::new(""), 1, visit).map(|_| ())
    }

    fn level(
        &self,
        dir: &OwnedFd,
        rel: &Path,
        depth: u32,
        visit: &mut dyn FnMut(&Entry<'_>) -> Result<Next, AgentError>,
    ) -> Result<Next, AgentError> {
        let mut names = Vec::new();
        let listing = std::fs::read_dir(fd_path(dir.as_fd()))
            .map_err(io(format!("list {}", rel.display())))?;
        for e in listing.flatten() {
            if let Ok(meta) = e.metadata() {
                names.push((e.file_name(), meta));
            }
        }
        names.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, meta) in names {
            if self.cancel.load(Ordering::Relaxed) {
                return Err(AgentError::Cancelled);
            }
            let entry = Entry {
                dir,
                rel: rel.join(&name),
                name,
                meta,
            };
            if let Next::Stop = visit(&entry)? {
                return Ok(Next::Stop);
            }
            if entry.meta.is_dir() && depth < self.max_depth {
                let Ok(sub) = open_beneath(
                    dir,
                    Path::new(&entry.name),
                    libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
                    0,
                ) else {
                    continue;
                };
                if let Next::Stop = self.level(&sub, &entry.rel, depth + 1, visit)? {
                    return Ok(Next::Stop);
                }
            }
        }
        Ok(Next::Go)
    }
}
