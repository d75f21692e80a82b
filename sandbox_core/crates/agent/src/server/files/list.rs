//! ListDir: a directory's entries, and theirs down to a depth.

use std::sync::atomic::AtomicBool;

use sandbox_proto as pb;

use super::describe::{describe, At};
use super::walk::{Next, Walk};
use super::{absolute, io};
use crate::error::AgentError;
use crate::paths::{open_beneath, open_root, Roots};
use crate::server::accounts::Ids;

/// Most levels one listing descends.
pub const MAX_DEPTH: u32 = 64;
/// Most entries one listing answers (a bigger tree: list it in parts).
pub const MAX_ENTRIES: usize = 100_000;

pub fn list_dir(
    roots: &Roots,
    ids: &Ids,
    path: &str,
    depth: u32,
    cancel: &AtomicBool,
) -> Result<Vec<pb::DirEntry>, AgentError> {
    if depth > MAX_DEPTH {
        return Err(AgentError::Invalid(format!(
            "depth {depth}: a listing descends at most {MAX_DEPTH} levels"
        )));
    }
    let path = if path.is_empty() { "." } else { path };
    let r = roots.resolve(path)?;
    let root = open_root(&r.root)?;
    let dir = open_beneath(&root, &r.rel, libc::O_RDONLY | libc::O_DIRECTORY, 0)
        .map_err(io(format!("open {path}")))?;
    let base = absolute(&r.root, &r.rel);
    let mut entries = Vec::new();
    let walk = Walk {
        cancel,
        max_depth: depth.max(1),
    };
    walk.run(&dir, &mut |e| {
        if entries.len() == MAX_ENTRIES {
            return Err(AgentError::TooLarge(format!(
                "{path}: more than {MAX_ENTRIES} entries (list fewer levels, or a directory below)"
            )));
        }
        let rel = r.rel.join(&e.rel);
        let at = At {
            root: &root,
            dir: e.dir,
            rel: &rel,
            name: &e.name,
            path: absolute(std::path::Path::new(&base), &e.rel),
        };
        entries.push(describe(&at, &e.meta, ids));
        Ok(Next::Go)
    })?;
    Ok(entries)
}
