//! A checkpoint's layer: the agent's `Checkpoint` tar (proto/agent.proto) unpacked into a fresh
//! directory in the form an overlay's lower layer takes (OCI whiteouts become whiteout devices,
//! opaque markers the overlay's opaque attribute), and the stream's sha256, which names the layer.
//!
//! The stream comes from a sandbox, so nothing in it may reach outside `dest`: a path is relative
//! with plain components only, no entry is ever made through a symlink (every ancestor must be a
//! real directory of `dest`), only directories, regular files, symlinks and whiteouts are made, and
//! set-id bits are dropped. Ids are stored as the stream gives them (the programs' own, as an
//! image's are): the sandbox made from the layer maps them into its user namespace.
//!
//! Holes stay holes: a GNU sparse entry (how the agent sends a file with holes) is written with
//! its holes skipped, and a layer is counted by the bytes its files allocate. Every unpack is
//! bounded while it runs (`Limits`: the stream's bytes and the entries it makes); past a bound it
//! stops with `ErrorKind::FileTooLarge` or `QuotaExceeded`, naming the bound.

use std::collections::HashMap;
use std::io::{self, Read};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::digest::{hex, HashingReader};
use crate::safe::{allocated, bad, checked, clear, lchown, name, parents, set_mtime, write_new};
use crate::whiteout::{self, Marker};

/// What `unpack` made.
pub struct Unpacked {
    /// The stream's sha256, hex.
    pub digest: String,
    /// Bytes of the stream.
    pub bytes: u64,
    /// Bytes the layer's files and directories allocate on the host.
    pub allocated: u64,
    /// Entries made.
    pub entries: u64,
}

/// The bounds of one unpack.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Bytes of the stream (a hole costs none of them).
    pub max_bytes: u64,
    /// Entries (files, directories, links, whiteouts): the inodes the layer may take.
    pub max_entries: u64,
}

impl Limits {
    pub const NONE: Limits = Limits {
        max_bytes: u64::MAX,
        max_entries: u64::MAX,
    };
}

/// Unpacks the stream `src` into `dest` (an empty directory), within `limits`.
pub fn unpack(src: impl Read, dest: &Path, limits: Limits) -> io::Result<Unpacked> {
    let mut hashing = HashingReader::new(src, limits.max_bytes);
    let mut entries = 0u64;
    let mut used = 0u64;
    // Directories get their modes and times last (a read-only one would refuse its entries).
    let mut dirs: HashMap<PathBuf, (u32, u64, u64, u64)> = HashMap::new();
    let walked = (|| -> io::Result<()> {
        let mut archive = tar::Archive::new(&mut hashing);
        for entry in archive.entries()? {
            let mut entry = entry?;
            let rel = checked(&entry.path()?)?;
            parents(dest, &rel)?;
            let target = dest.join(&rel);
            let h = entry.header();
            let (mode, uid, gid, mtime) = (
                h.mode()? & 0o1777,
                h.uid()?,
                h.gid()?,
                h.mtime().unwrap_or(0),
            );
            let parent = target.parent().unwrap_or(dest).to_path_buf();
            entries += 1;
            if entries > limits.max_entries {
                return Err(io::Error::new(
                    io::ErrorKind::QuotaExceeded,
                    format!(
                        "the checkpoint passed its bound of {} files and directories",
                        limits.max_entries
                    ),
                ));
            }
            match whiteout::marker(name(&rel))? {
                Some(Marker::Opaque) => {
                    whiteout::make_opaque(&parent)?;
                    continue;
                }
                Some(Marker::Deletes(hidden)) => {
                    let p = parent.join(hidden);
                    clear(&p)?;
                    whiteout::make_whiteout(&p)?;
                    continue;
                }
                None => {}
            }
            match h.entry_type() {
                tar::EntryType::Directory => {
                    match std::fs::symlink_metadata(&target) {
                        Ok(m) if m.is_dir() => {}
                        Ok(_) => {
                            clear(&target)?;
                            std::fs::DirBuilder::new().mode(0o700).create(&target)?;
                        }
                        Err(_) => std::fs::DirBuilder::new().mode(0o700).create(&target)?,
                    }
                    dirs.insert(target, (mode, uid, gid, mtime));
                }
                tar::EntryType::Regular => {
                    clear(&target)?;
                    write_new(&target, &mut entry)?;
                    lchown(&target, uid, gid, false)?;
                    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(mode))?;
                    set_mtime(&target, mtime)?;
                    used += allocated(&target);
                }
                tar::EntryType::GNUSparse => {
                    clear(&target)?;
                    // The tar reader's own unpack seeks over each hole (its `Read` would give
                    // the zeros); it makes the file new (O_EXCL: never through a symlink).
                    entry.set_preserve_permissions(false);
                    entry.unpack(&target)?;
                    if !std::fs::symlink_metadata(&target)?.is_file() {
                        return Err(bad(format!("{} is not a file", rel.display())));
                    }
                    lchown(&target, uid, gid, false)?;
                    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(mode))?;
                    set_mtime(&target, mtime)?;
                    used += allocated(&target);
                }
                tar::EntryType::Symlink => {
                    let link = entry
                        .link_name()?
                        .ok_or_else(|| bad("a symlink without a target"))?
                        .into_owned();
                    clear(&target)?;
                    std::os::unix::fs::symlink(&link, &target)?;
                    lchown(&target, uid, gid, false)?;
                    set_mtime(&target, mtime)?;
                }
                _ => entries -= 1, // the agent sends no other kind; nothing else is made
            }
        }
        Ok(())
    })();
    // The tar reader wraps a reader's error in its own: the bound's is told as it is.
    if let Err(e) = walked {
        return Err(if hashing.bytes > hashing.max {
            hashing.passed()
        } else {
            e
        });
    }
    // Read what follows the archive's end too: the digest covers the whole stream.
    io::copy(&mut hashing, &mut io::sink())?;
    let mut dirs: Vec<_> = dirs.into_iter().collect();
    dirs.sort_by_key(|(p, _)| std::cmp::Reverse(p.components().count()));
    for (p, (mode, uid, gid, mtime)) in dirs {
        lchown(&p, uid, gid, false)?;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode))?;
        set_mtime(&p, mtime)?;
        used += allocated(&p);
    }
    Ok(Unpacked {
        digest: hex(hashing.sha),
        bytes: hashing.bytes,
        allocated: used,
        entries,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{scratch, stream};
    use sha2::{Digest, Sha256};

    #[test]
    fn a_layer_is_made_with_whiteouts_and_without_set_id_bits() {
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        let d = scratch("ok");
        let tar = stream(&[
            ("work", tar::EntryType::Directory, b""),
            ("work/run", tar::EntryType::Regular, b"#!/bin/sh\n"),
            ("work/link", tar::EntryType::Symlink, b"/etc/passwd"),
            ("work/.wh.gone", tar::EntryType::Regular, b""),
        ]);
        let u = unpack(&tar[..], &d, Limits::NONE).unwrap();
        assert_eq!(u.entries, 4);
        assert_eq!(u.bytes, tar.len() as u64);
        assert_eq!(u.digest, format!("{:x}", Sha256::digest(&tar)));
        let run = std::fs::metadata(d.join("work/run")).unwrap();
        assert_eq!(run.mode() & 0o7777, 0o755, "set-id bits dropped");
        assert_eq!(std::fs::read(d.join("work/run")).unwrap(), b"#!/bin/sh\n");
        assert_eq!(
            std::fs::read_link(d.join("work/link")).unwrap(),
            Path::new("/etc/passwd")
        );
        let gone = std::fs::symlink_metadata(d.join("work/gone")).unwrap();
        assert!(gone.file_type().is_char_device() && gone.rdev() == 0);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn nothing_is_made_outside_the_layer() {
        let outside = scratch("outside");
        for (name, entries) in [
            (
                "dotdot",
                vec![("../escaped", tar::EntryType::Regular, &b"x"[..])],
            ),
            (
                "absolute",
                vec![("/escaped", tar::EntryType::Regular, &b"x"[..])],
            ),
            (
                "through-a-symlink",
                vec![
                    (
                        "up",
                        tar::EntryType::Symlink,
                        outside.to_str().unwrap().as_bytes(),
                    ),
                    ("up/escaped", tar::EntryType::Regular, &b"x"[..]),
                ],
            ),
            (
                "a-whiteout-of-the-parent",
                vec![("d/.wh..", tar::EntryType::Regular, &b""[..])],
            ),
        ] {
            let d = scratch(name);
            let tar = stream(&entries);
            assert!(unpack(&tar[..], &d, Limits::NONE).is_err(), "{name}");
            assert!(!outside.join("escaped").exists(), "{name}");
            assert!(!d.parent().unwrap().join("escaped").exists(), "{name}");
            std::fs::remove_dir_all(&d).unwrap();
        }
        std::fs::remove_dir_all(&outside).unwrap();
    }
}
