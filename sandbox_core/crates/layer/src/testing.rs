//! What the tests share: scratch directories, tars written entry by entry, and a layer's tree
//! as a value to compare.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::whiteout;

/// A fresh empty directory of this test process, named `name`.
pub fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("layer-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn header(kind: tar::EntryType, mode: u32) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(kind);
    h.set_mode(mode);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(1_000_000_000);
    h.set_size(0);
    h
}

/// A stream of raw entries (path, kind, data or link target), paths written as given, every
/// mode 04755.
pub fn stream(entries: &[(&str, tar::EntryType, &[u8])]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (path, kind, data) in entries {
        let mut h = header(*kind, 0o4755);
        h.as_old_mut().name[..path.len()].copy_from_slice(path.as_bytes());
        match kind {
            tar::EntryType::Symlink | tar::EntryType::Link => {
                h.as_old_mut().linkname[..data.len()].copy_from_slice(data);
                h.set_cksum();
                b.append(&h, std::io::empty()).unwrap();
            }
            _ => {
                h.set_size(data.len() as u64);
                h.set_cksum();
                b.append(&h, *data).unwrap();
            }
        }
    }
    b.into_inner().unwrap()
}

/// One entry of a tree: its kind, mode, ids, time and contents (a file's bytes, a link's
/// target; whether a directory is opaque).
#[derive(Debug, PartialEq, Eq)]
pub enum Node {
    Dir {
        mode: u32,
        ids: (u32, u32),
        mtime: i64,
        opaque: bool,
    },
    File {
        mode: u32,
        ids: (u32, u32),
        mtime: i64,
        data: Vec<u8>,
    },
    Symlink {
        ids: (u32, u32),
        target: PathBuf,
    },
    Whiteout,
}

/// Every entry under `root`, by its path relative to it.
pub fn tree(root: &Path) -> BTreeMap<PathBuf, Node> {
    let mut out = BTreeMap::new();
    walk(root, Path::new(""), &mut out);
    out
}

fn walk(root: &Path, rel: &Path, out: &mut BTreeMap<PathBuf, Node>) {
    for e in std::fs::read_dir(root.join(rel)).unwrap() {
        let e = e.unwrap();
        let rel = rel.join(e.file_name());
        let at = root.join(&rel);
        let m = std::fs::symlink_metadata(&at).unwrap();
        let (mode, ids, mtime) = (m.mode() & 0o7777, (m.uid(), m.gid()), m.mtime());
        let node = if m.is_dir() {
            walk(root, &rel, out);
            Node::Dir {
                mode,
                ids,
                mtime,
                opaque: whiteout::is_opaque(&at),
            }
        } else if m.is_symlink() {
            Node::Symlink {
                ids,
                target: std::fs::read_link(&at).unwrap(),
            }
        } else if whiteout::is_whiteout(&m) {
            Node::Whiteout
        } else {
            Node::File {
                mode,
                ids,
                mtime,
                data: std::fs::read(&at).unwrap(),
            }
        };
        out.insert(rel, node);
    }
}

/// Sets `p`'s time (not followed).
pub fn touch(p: &Path, mtime: u64) {
    crate::safe::set_mtime(p, mtime).unwrap();
}
