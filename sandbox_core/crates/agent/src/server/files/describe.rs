//! One entry as the file calls answer it (`pb::DirEntry`): its type, size, permission bits, times,
//! owners as the sandbox sees them, and for a symlink what it says and whether it leads to a
//! directory inside the sandbox.

use std::ffi::OsStr;
use std::fs::Metadata;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::Path;

use sandbox_proto as pb;

use super::fd_path;
use crate::paths::open_beneath;
use crate::server::accounts::Ids;

/// Where an entry is: the root it is beneath, the directory it is in, its path beneath the root,
/// its name and the absolute path callers see.
pub struct At<'a> {
    pub root: &'a OwnedFd,
    pub dir: &'a OwnedFd,
    pub rel: &'a Path,
    pub name: &'a OsStr,
    pub path: String,
}

pub fn type_name(meta: &Metadata) -> &'static str {
    let t = meta.file_type();
    if t.is_symlink() {
        "symlink"
    } else if t.is_dir() {
        "dir"
    } else if t.is_fifo() {
        "fifo"
    } else if t.is_socket() {
        "socket"
    } else if t.is_char_device() {
        "char"
    } else if t.is_block_device() {
        "block"
    } else {
        "file"
    }
}

/// The entry `at` whose (not followed) metadata is `meta`.
pub fn describe(at: &At<'_>, meta: &Metadata, ids: &Ids) -> pb::DirEntry {
    let is_symlink = meta.file_type().is_symlink();
    let (uid, owner) = ids.user(meta.uid());
    let (gid, group) = ids.group(meta.gid());
    let (symlink_target, target_is_dir) = if is_symlink {
        let target = std::fs::read_link(fd_path(at.dir.as_fd()).join(at.name))
            .map(|t| t.to_string_lossy().into_owned())
            .unwrap_or_default();
        // Followed beneath the root only: a link out of the sandbox leads nowhere.
        let is_dir = open_beneath(at.root, at.rel, libc::O_PATH | libc::O_DIRECTORY, 0).is_ok();
        (target, is_dir)
    } else {
        (String::new(), false)
    };
    pb::DirEntry {
        name: if at.name == "." {
            Path::new(&at.path)
                .file_name()
                .map_or_else(|| at.path.clone(), |n| n.to_string_lossy().into_owned())
        } else {
            at.name.to_string_lossy().into_owned()
        },
        is_dir: meta.is_dir(),
        size: meta.len(),
        mode: meta.permissions().mode() & 0o7777,
        is_symlink,
        path: at.path.clone(),
        mtime: meta.mtime() as f64 + meta.mtime_nsec() as f64 / 1e9,
        uid,
        gid,
        owner,
        group,
        symlink_target,
        target_is_dir,
        r#type: type_name(meta).to_string(),
    }
}
