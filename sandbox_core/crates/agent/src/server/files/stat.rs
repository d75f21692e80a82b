//! Stat: one entry, a symlink described rather than followed.

use sandbox_proto as pb;

use super::describe::{describe, At};
use super::{absolute, fd_path, io, open_parent, split};
use crate::error::AgentError;
use crate::paths::{open_root, Roots};
use crate::server::accounts::Ids;
use std::os::fd::AsFd;

pub fn stat(roots: &Roots, ids: &Ids, path: &str) -> Result<pb::DirEntry, AgentError> {
    let r = roots.resolve(path)?;
    let root = open_root(&r.root)?;
    let dir = open_parent(&root, &r.rel, path)?;
    let name = split(&r.rel).1;
    let meta = std::fs::symlink_metadata(fd_path(dir.as_fd()).join(name))
        .map_err(io(format!("stat {path}")))?;
    let at = At {
        root: &root,
        dir: &dir,
        rel: &r.rel,
        name,
        path: absolute(&r.root, &r.rel),
    };
    Ok(describe(&at, &meta, ids))
}
