//! An OCI image layer applied onto a root file system being built (an image's layers, bottom
//! first, or a root file system tarball): the tar's whiteouts delete what the layers below made,
//! and the rest is extracted with its owners and modes as they are (set-id bits included: they
//! are the image's).
//!
//! The layer is read twice as a stream: first its whiteouts and opaque markers delete (before
//! anything of this layer is written: an opaque directory's marker may come after the
//! directory's new files), then its entries are made. Nothing lands outside `dest`: an entry's
//! name is relative with plain components; a symlink on its way is followed only while it stays
//! inside `dest` (a relative one, resolved as in the image; an absolute one names the host's
//! file system and is refused), a symlink the layer itself makes may point anywhere (it is read
//! in the sandbox, whose root is `dest`), and a hard link's target must resolve inside `dest`.
//! Devices and FIFOs are left out.

use std::collections::HashMap;
use std::io::{self, Read};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::safe::{self, bad, checked, clear, clear_children, context, plain, resolve, Resolve};
use crate::whiteout::{self, Marker};

/// Applies the layer tar that `open` gives (called twice, for a stream from its start each time)
/// onto `dest`.
pub fn apply<R: Read>(mut open: impl FnMut() -> io::Result<R>, dest: &Path) -> io::Result<()> {
    delete(open()?, dest)?;
    extract(open()?, dest)
}

/// The first pass: what the layer's whiteouts and opaque markers delete.
fn delete(src: impl Read, dest: &Path) -> io::Result<()> {
    for entry in tar::Archive::new(src).entries()? {
        let entry = entry?;
        let path = entry.path()?;
        let Some(name) = path.file_name() else {
            continue;
        };
        let Some(marker) = whiteout::marker(name)? else {
            continue;
        };
        let rel = checked(&path)?;
        let parent = rel.parent().unwrap_or(Path::new(""));
        let resolved = resolve(dest, parent, Resolve::Existing);
        let Some(dir) = resolved.map_err(|e| context(format!("whiteout {}", rel.display()), e))?
        else {
            continue; // nothing there to delete
        };
        match marker {
            Marker::Opaque => clear_children(&dest.join(dir))?,
            Marker::Deletes(hidden) => clear(&dest.join(dir).join(hidden))?,
        }
    }
    Ok(())
}

/// A directory's mode, ids and time, set once every entry of the layer is made (a read-only
/// directory would refuse its entries).
type DirAttrs = (u32, u64, u64, u64);

/// The second pass: the layer's entries made.
fn extract(src: impl Read, dest: &Path) -> io::Result<()> {
    let mut dirs: HashMap<PathBuf, DirAttrs> = HashMap::new();
    for entry in tar::Archive::new(src).entries()? {
        let mut entry = entry?;
        let path = entry.path()?.into_owned();
        let rel = plain(&path)?;
        if whiteout::is_marker(safe::name(&rel)) {
            continue;
        }
        let h = entry.header();
        let (mode, uid, gid, mtime) = (
            h.mode()? & 0o7777,
            h.uid()?,
            h.gid()?,
            h.mtime().unwrap_or(0),
        );
        let mut kind = h.entry_type();
        // A directory of an old tar: a regular file whose name ends with a slash.
        if kind == tar::EntryType::Regular && entry.path_bytes().ends_with(b"/") {
            kind = tar::EntryType::Directory;
        }
        if rel.as_os_str().is_empty() {
            // The top itself ("./"): only its attributes.
            if kind == tar::EntryType::Directory {
                dirs.insert(dest.to_path_buf(), (mode, uid, gid, mtime));
                continue;
            }
            return Err(bad(format!("entry {} is not a directory", path.display())));
        }
        if !matches!(
            kind,
            tar::EntryType::Directory
                | tar::EntryType::Regular
                | tar::EntryType::Continuous
                | tar::EntryType::GNUSparse
                | tar::EntryType::Symlink
                | tar::EntryType::Link
        ) {
            continue; // devices, FIFOs and records of the tar's own
        }
        let parent = resolve(dest, rel.parent().unwrap_or(Path::new("")), Resolve::Make)
            .map_err(|e| context(format!("entry {}", rel.display()), e))?
            .unwrap_or_default();
        let target = dest.join(parent).join(safe::name(&rel));
        match std::fs::symlink_metadata(&target) {
            Ok(m) if m.is_dir() && kind == tar::EntryType::Directory => {}
            Ok(_) => clear(&target)?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        match kind {
            tar::EntryType::Directory => {
                if !target.is_dir() {
                    std::fs::DirBuilder::new().mode(0o700).create(&target)?;
                }
                dirs.insert(target, (mode, uid, gid, mtime));
            }
            tar::EntryType::Symlink => {
                let link = entry
                    .link_name()?
                    .ok_or_else(|| bad("a symlink without a target"))?
                    .into_owned();
                std::os::unix::fs::symlink(&link, &target)?;
                safe::lchown(&target, uid, gid, true)?;
                safe::set_mtime(&target, mtime)?;
            }
            tar::EntryType::Link => {
                let link = entry
                    .link_name()?
                    .ok_or_else(|| bad("a hard link without a target"))?
                    .into_owned();
                let within = resolve(dest, &link, Resolve::Target).map_err(|e| {
                    context(
                        format_args!("hard link {} to {}", rel.display(), link.display()),
                        e,
                    )
                })?;
                std::fs::hard_link(dest.join(within.unwrap_or_default()), &target)?;
                attributes(&target, mode, uid, gid, mtime)?;
            }
            tar::EntryType::GNUSparse => {
                // The tar reader's own unpack seeks over each hole; it makes the file new
                // (O_EXCL: never through a symlink).
                entry.set_preserve_permissions(false);
                entry.unpack(&target)?;
                if !std::fs::symlink_metadata(&target)?.is_file() {
                    return Err(bad(format!("{} is not a file", rel.display())));
                }
                attributes(&target, mode, uid, gid, mtime)?;
            }
            _ => {
                safe::write_new(&target, &mut entry)?;
                attributes(&target, mode, uid, gid, mtime)?;
            }
        }
    }
    let mut dirs: Vec<_> = dirs.into_iter().collect();
    dirs.sort_by_key(|(p, _)| std::cmp::Reverse(p.components().count()));
    for (p, (mode, uid, gid, mtime)) in dirs {
        attributes(&p, mode, uid, gid, mtime)?;
    }
    Ok(())
}

/// Owner (kept where this process cannot give it), mode and time of what is at `p` (not a symlink).
fn attributes(p: &Path, mode: u32, uid: u64, gid: u64, mtime: u64) -> io::Result<()> {
    safe::lchown(p, uid, gid, true)?;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))?;
    safe::set_mtime(p, mtime)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{scratch, stream};
    use std::os::unix::fs::MetadataExt;
    use tar::EntryType::{Directory, Link, Regular, Symlink};

    fn apply_all(dest: &Path, layers: &[Vec<u8>]) -> io::Result<()> {
        for l in layers {
            apply(|| Ok(&l[..]), dest)?;
        }
        Ok(())
    }

    #[test]
    fn whiteouts_delete_what_lower_layers_made() {
        let d = scratch("apply");
        let lower = stream(&[
            ("usr", Directory, b""),
            ("usr/bin", Directory, b""),
            ("usr/bin/keep", Regular, b"k"),
            ("usr/bin/gone", Regular, b"g"),
            ("opt", Directory, b""),
            ("opt/old", Regular, b"o"),
            ("opt/sub", Directory, b""),
            ("opt/sub/old", Regular, b"o"),
        ]);
        // The opaque marker comes after the directory's new entries: only the lower ones go.
        let upper = stream(&[
            ("usr/bin/.wh.gone", Regular, b""),
            ("opt", Directory, b""),
            ("opt/new", Regular, b"n"),
            ("opt/sub/new", Regular, b"n"),
            ("opt/.wh..wh..opq", Regular, b""),
        ]);
        apply_all(&d, &[lower, upper]).unwrap();
        let names = |p: &str| {
            let mut v: Vec<String> = std::fs::read_dir(d.join(p))
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            v.sort();
            v
        };
        assert_eq!(names("usr/bin"), ["keep"]);
        assert_eq!(names("opt"), ["new", "sub"]);
        assert_eq!(names("opt/sub"), ["new"]);
        let keep = std::fs::metadata(d.join("usr/bin/keep")).unwrap();
        assert_eq!(keep.mode() & 0o7777, 0o4755, "an image's set-id bits stay");
        assert_eq!(keep.mtime(), 1_000_000_000);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn links_are_made_and_followed_inside_only() {
        let d = scratch("apply-links");
        let layer = stream(&[
            ("usr/lib", Directory, b""),
            ("lib", Symlink, b"usr/lib"),
            ("etc", Symlink, b"/etc"),
            ("lib/libc", Regular, b"c"),
            ("usr/libc-again", Link, b"lib/libc"),
        ]);
        apply_all(&d, &[layer]).unwrap();
        assert_eq!(std::fs::read(d.join("usr/lib/libc")).unwrap(), b"c");
        assert_eq!(
            std::fs::read_link(d.join("etc")).unwrap(),
            Path::new("/etc")
        );
        let ino = |p: &str| std::fs::metadata(d.join(p)).unwrap().ino();
        assert_eq!(ino("usr/libc-again"), ino("usr/lib/libc"));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn nothing_is_written_or_deleted_outside() {
        let outside = scratch("apply-outside");
        std::fs::write(outside.join("secret"), b"s").unwrap();
        let o = outside.to_str().unwrap().as_bytes();
        for (name, entries) in [
            ("dotdot", vec![("../escaped", Regular, &b"x"[..])]),
            ("absolute", vec![("/escaped", Regular, &b"x"[..])]),
            (
                "through-an-absolute-link",
                vec![("up", Symlink, o), ("up/escaped", Regular, &b"x"[..])],
            ),
            (
                "through-a-relative-link",
                vec![
                    ("up", Symlink, &b"../.."[..]),
                    ("up/escaped", Regular, &b"x"[..]),
                ],
            ),
            (
                "a-hard-link-out",
                vec![("escaped", Link, &b"../apply-outside/secret"[..])],
            ),
            (
                "a-hard-link-through-a-link",
                vec![("up", Symlink, o), ("escaped", Link, &b"up/secret"[..])],
            ),
            ("a-whiteout-out", vec![("../.wh.secret", Regular, &b""[..])]),
            (
                "a-whiteout-through-a-link",
                vec![("up", Symlink, o), ("up/.wh.secret", Regular, &b""[..])],
            ),
        ] {
            let d = scratch(&format!("apply-{name}"));
            // A link of a lower layer counts as much as one of the same layer.
            let (lower, upper): (Vec<_>, Vec<_>) = entries
                .into_iter()
                .partition(|(_, kind, _)| *kind == Symlink);
            let layers = [stream(&lower), stream(&upper)];
            assert!(apply_all(&d, &layers).is_err(), "{name}");
            assert!(!outside.join("escaped").exists(), "{name}");
            assert!(!d.parent().unwrap().join("escaped").exists(), "{name}");
            assert_eq!(
                std::fs::read(outside.join("secret")).unwrap(),
                b"s",
                "{name}"
            );
            std::fs::remove_dir_all(&d).unwrap();
        }
        std::fs::remove_dir_all(&outside).unwrap();
    }
}
