//! The file operations every conversion shares: a tar's paths checked to stay inside the
//! directory they are unpacked into, that directory's ancestors found or made without a symlink
//! leading out, and the calls std lacks (ids, times and removal of what a path names, never
//! following it).

use std::collections::VecDeque;
use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Component, Path, PathBuf};

/// Symlinks followed in one resolution before it is refused (the kernel's own bound).
const MAX_LINKS: u32 = 40;

pub fn bad(what: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.into())
}

fn leaves(path: &Path) -> io::Error {
    bad(format!("entry {} leaves the layer", path.display()))
}

/// `path` if it is relative with plain components only (`.` dropped); empty for the top itself.
pub fn plain(path: &Path) -> io::Result<PathBuf> {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::Normal(p) => out.push(p),
            Component::CurDir => {}
            _ => return Err(leaves(path)),
        }
    }
    Ok(out)
}

/// `path` if it is relative with plain components only and names something below the top.
pub fn checked(path: &Path) -> io::Result<PathBuf> {
    let out = plain(path)?;
    if out.as_os_str().is_empty() {
        return Err(bad("an entry with an empty path"));
    }
    Ok(out)
}

/// Makes the ancestors of `rel` under `dest` that are missing; refuses one that is not a real
/// directory (a symlink above an entry would send it elsewhere).
pub fn parents(dest: &Path, rel: &Path) -> io::Result<()> {
    let mut at = dest.to_path_buf();
    let mut comps: Vec<_> = rel.components().collect();
    comps.pop();
    for c in comps {
        at.push(c);
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Err(bad(format!("{} is not a directory", at.display()))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                std::fs::DirBuilder::new().mode(0o755).create(&at)?
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// How `resolve` treats what it looks up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolve {
    /// A directory: the missing ones on the way are made (0755).
    Make,
    /// A directory that may be missing or not be one (then `None`).
    Existing,
    /// Something that must exist, the last component's symlink followed too (a hard link's target).
    Target,
}

/// `rel` in `root`, as a path relative to `root` with no symlink in it: a symlink on the way is
/// followed as if `root` were `/` for the tar's own entries, but only a relative one whose `..`
/// stay inside `root` (an absolute one names the host's file system, not the image's, and is
/// refused with the rest). Errors name no path: the caller says what was resolved.
pub fn resolve(root: &Path, rel: &Path, how: Resolve) -> io::Result<Option<PathBuf>> {
    let mut at = PathBuf::new();
    let mut pending: VecDeque<OsString> = VecDeque::new();
    push_front(&mut pending, rel)?;
    let mut links = 0;
    while let Some(c) = pending.pop_front() {
        if c == ".." {
            if !at.pop() {
                return Err(bad("it leads outside the layer (`..` above its top)"));
            }
            continue;
        }
        let path = root.join(&at).join(&c);
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.is_dir() => at.push(&c),
            Ok(m) if m.is_symlink() => {
                links += 1;
                if links > MAX_LINKS {
                    return Err(bad("too many levels of symbolic links"));
                }
                push_front(&mut pending, &std::fs::read_link(&path)?)?;
            }
            Ok(_) if how == Resolve::Target && pending.is_empty() => at.push(&c),
            Ok(_) if how == Resolve::Existing => return Ok(None),
            Ok(_) => return Err(bad(format!("{} is not a directory", at.join(&c).display()))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => match how {
                Resolve::Make => {
                    std::fs::DirBuilder::new().mode(0o755).create(&path)?;
                    at.push(&c);
                }
                Resolve::Existing => return Ok(None),
                Resolve::Target => return Err(e),
            },
            Err(e) => return Err(e),
        }
    }
    Ok(Some(at))
}

/// Puts the components of `path` before those pending; an absolute one leaves.
fn push_front(pending: &mut VecDeque<OsString>, path: &Path) -> io::Result<()> {
    let mut comps = Vec::new();
    for c in path.components() {
        match c {
            Component::Normal(p) => comps.push(p.to_os_string()),
            Component::ParentDir => comps.push(OsString::from("..")),
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => {
                return Err(bad("it leads outside the layer (an absolute path)"))
            }
        }
    }
    for c in comps.into_iter().rev() {
        pending.push_front(c);
    }
    Ok(())
}

/// `e` with what it happened to first.
pub fn context(what: impl std::fmt::Display, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// A new regular file at `p` (never through a symlink, never over an existing one) holding what
/// `src` gives, mode 0600 until its attributes are set.
pub fn write_new(p: &Path, src: &mut impl io::Read) -> io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(p)?;
    io::copy(src, &mut file)?;
    Ok(())
}

pub fn c_path(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| bad("a path with a NUL byte"))
}

/// Removes whatever is at `p` (a file, symlink or tree), never following a symlink.
pub fn clear(p: &Path) -> io::Result<()> {
    match std::fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(p),
        Ok(_) => std::fs::remove_file(p),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Removes everything in the directory `dir` (never following a symlink), keeping `dir`.
pub fn clear_children(dir: &Path) -> io::Result<()> {
    for e in std::fs::read_dir(dir)? {
        clear(&e?.path())?;
    }
    Ok(())
}

/// The names in `dir`, sorted.
pub fn sorted_names(dir: &Path) -> io::Result<Vec<OsString>> {
    let mut names = std::fs::read_dir(dir)?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<io::Result<Vec<_>>>()?;
    names.sort();
    Ok(names)
}

/// Gives `p` (not followed) the ids `uid` and `gid`; a manager that is not root keeps its own
/// (its sandboxes have no id range), as it does an id its user namespace does not map when
/// `unmapped` is tolerated.
pub fn lchown(p: &Path, uid: u64, gid: u64, unmapped: bool) -> io::Result<()> {
    let (uid, gid) = (
        u32::try_from(uid).map_err(|_| bad("uid out of range"))?,
        u32::try_from(gid).map_err(|_| bad("gid out of range"))?,
    );
    match std::os::unix::fs::lchown(p, Some(uid), Some(gid)) {
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => Ok(()),
        Err(e) if unmapped && e.raw_os_error() == Some(libc::EINVAL) => Ok(()),
        r => r,
    }
}

/// Sets the modification (and access) time of `p`, not followed.
pub fn set_mtime(p: &Path, mtime: u64) -> io::Result<()> {
    let c = c_path(p)?;
    let t = libc::timespec {
        tv_sec: mtime.min(i64::MAX as u64) as libc::time_t,
        tv_nsec: 0,
    };
    // SAFETY: utimensat with a valid C string and two timespecs.
    let rc = unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            c.as_ptr(),
            [t, t].as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// What `p` allocates (its blocks), never following a symlink.
pub fn allocated(p: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(p)
        .map(|m| m.blocks() * 512)
        .unwrap_or(0)
}

/// The last component of `rel` (a checked path).
pub fn name(rel: &Path) -> &OsStr {
    rel.file_name().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::scratch;

    #[test]
    fn links_are_followed_only_inside() {
        let root = scratch("resolve");
        std::fs::create_dir_all(root.join("usr/lib")).unwrap();
        std::os::unix::fs::symlink("usr/lib", root.join("lib")).unwrap();
        std::os::unix::fs::symlink("../../..", root.join("usr/lib/up")).unwrap();
        std::os::unix::fs::symlink("/etc", root.join("abs")).unwrap();
        std::os::unix::fs::symlink("loop", root.join("loop")).unwrap();
        let r = |p: &str, how| resolve(&root, Path::new(p), how);
        assert_eq!(
            r("lib/x", Resolve::Make).unwrap(),
            Some(PathBuf::from("usr/lib/x"))
        );
        assert!(root.join("usr/lib/x").is_dir());
        assert_eq!(r("lib/y", Resolve::Existing).unwrap(), None);
        assert!(r("lib/up/z", Resolve::Make).is_err());
        assert!(r("abs/z", Resolve::Make).is_err());
        assert!(r("loop/z", Resolve::Make).is_err());
        assert!(r("../z", Resolve::Existing).is_err());
        std::fs::write(root.join("usr/lib/f"), b"").unwrap();
        std::os::unix::fs::symlink("lib/f", root.join("usr/f")).unwrap();
        assert_eq!(
            r("usr/f", Resolve::Target).unwrap(),
            Some(PathBuf::from("usr/lib/f"))
        );
        assert_eq!(r("usr/lib/f/g", Resolve::Existing).unwrap(), None);
        assert!(r("usr/lib/f/g", Resolve::Make).is_err());
        std::fs::remove_dir_all(&root).unwrap();
    }
}
