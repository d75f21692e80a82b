//! A checkpoint's layer on the host: the agent's `Checkpoint` tar (proto/agent.proto) unpacked into
//! a fresh directory in the form an overlay's lower layer takes (OCI whiteouts become whiteout
//! devices, opaque markers the overlay's opaque attribute), and the stream's sha256, which names
//! the layer.
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
use std::ffi::CString;
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use sha2::{Digest, Sha256};

const WHITEOUT: &[u8] = b".wh.";
const OPAQUE: &[u8] = b".wh..wh..opq";

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

/// Hashes and counts what is read through it, up to `max` bytes.
struct Hashing<R> {
    inner: R,
    sha: Sha256,
    bytes: u64,
    max: u64,
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.sha.update(&buf[..n]);
        self.bytes += n as u64;
        if self.bytes > self.max {
            return Err(self.passed());
        }
        Ok(n)
    }
}

impl<R> Hashing<R> {
    fn passed(&self) -> io::Error {
        io::Error::new(
            io::ErrorKind::FileTooLarge,
            format!(
                "the checkpoint passed its bound of {} bytes of changes",
                self.max
            ),
        )
    }
}

/// What `p` allocates (its blocks), never following a symlink.
fn allocated(p: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(p)
        .map(|m| m.blocks() * 512)
        .unwrap_or(0)
}

fn bad(what: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.into())
}

/// `path` if it is relative with plain components only.
fn checked(path: &Path) -> io::Result<PathBuf> {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::Normal(p) => out.push(p),
            Component::CurDir => {}
            _ => return Err(bad(format!("entry {} leaves the layer", path.display()))),
        }
    }
    if out.as_os_str().is_empty() {
        return Err(bad("an entry with an empty path"));
    }
    Ok(out)
}

/// Makes the ancestors of `rel` under `dest` that are missing; refuses one that is not a real
/// directory (a symlink above an entry would send it elsewhere).
fn parents(dest: &Path, rel: &Path) -> io::Result<()> {
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

fn c_path(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| bad("a path with a NUL byte"))
}

/// Removes whatever is at `p` (a file, symlink or tree), never following a symlink.
fn clear(p: &Path) -> io::Result<()> {
    match std::fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(p),
        Ok(_) => std::fs::remove_file(p),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

fn lchown(p: &Path, uid: u64, gid: u64) -> io::Result<()> {
    let (uid, gid) = (
        u32::try_from(uid).map_err(|_| bad("uid out of range"))?,
        u32::try_from(gid).map_err(|_| bad("gid out of range"))?,
    );
    match std::os::unix::fs::lchown(p, Some(uid), Some(gid)) {
        // A manager that is not root keeps its own ids (its sandboxes have no id range).
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => Ok(()),
        r => r,
    }
}

fn set_mtime(p: &Path, mtime: u64) -> io::Result<()> {
    let c = c_path(p)?;
    let t = libc::timespec {
        tv_sec: mtime as libc::time_t,
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

fn whiteout(p: &Path) -> io::Result<()> {
    let c = c_path(p)?;
    // SAFETY: mknod of a 0/0 character device (overlay's whiteout) at a valid C string.
    if unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn opaque(dir: &Path) -> io::Result<()> {
    let (c, attr) = (
        c_path(dir)?,
        CString::new("trusted.overlay.opaque").unwrap_or_default(),
    );
    // SAFETY: lsetxattr with valid C strings and a one-byte value.
    let rc = unsafe {
        libc::lsetxattr(
            c.as_ptr(),
            attr.as_ptr(),
            b"y".as_ptr() as *const libc::c_void,
            1,
            0,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Unpacks the stream `src` into `dest` (an empty directory), within `limits`.
pub fn unpack(src: impl Read, dest: &Path, limits: Limits) -> io::Result<Unpacked> {
    let mut hashing = Hashing {
        inner: src,
        sha: Sha256::new(),
        bytes: 0,
        max: limits.max_bytes,
    };
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
            let name = rel.file_name().map(|n| n.as_bytes()).unwrap_or_default();
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
            if name == OPAQUE {
                opaque(&parent)?;
                continue;
            }
            if let Some(hidden) = name.strip_prefix(WHITEOUT) {
                let p = parent.join(std::ffi::OsStr::from_bytes(hidden));
                clear(&p)?;
                whiteout(&p)?;
                continue;
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
                    let mut file = std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .mode(0o600)
                        .custom_flags(libc::O_NOFOLLOW)
                        .open(&target)?;
                    io::copy(&mut entry, &mut file)?;
                    drop(file);
                    lchown(&target, uid, gid)?;
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
                    lchown(&target, uid, gid)?;
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
                    lchown(&target, uid, gid)?;
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
        lchown(&p, uid, gid)?;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode))?;
        set_mtime(&p, mtime)?;
        used += allocated(&p);
    }
    let digest = hashing
        .sha
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    Ok(Unpacked {
        digest,
        bytes: hashing.bytes,
        allocated: used,
        entries,
    })
}

/// A `Read` of the chunks a channel brings (EOF when the sender is gone).
pub struct Chunks {
    rx: tokio::sync::mpsc::Receiver<bytes::Bytes>,
    at: bytes::Bytes,
}

impl Chunks {
    pub fn new(rx: tokio::sync::mpsc::Receiver<bytes::Bytes>) -> Self {
        Chunks {
            rx,
            at: bytes::Bytes::new(),
        }
    }
}

impl Read for Chunks {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.at.is_empty() {
            match self.rx.blocking_recv() {
                Some(b) => self.at = b,
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.at.len());
        buf[..n].copy_from_slice(&self.at[..n]);
        let _ = self.at.split_to(n);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dest(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("layer-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn header(kind: tar::EntryType, mode: u32, size: u64) -> tar::Header {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_mode(mode);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(1_000_000_000);
        h.set_size(size);
        h
    }

    /// A stream of raw entries (path, kind, data or link target), paths written as given.
    fn stream(entries: &[(&str, tar::EntryType, &[u8])]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (path, kind, data) in entries {
            let mut h = header(*kind, 0o4755, 0);
            match kind {
                tar::EntryType::Symlink => {
                    h.set_link_name(std::str::from_utf8(data).unwrap()).unwrap();
                    h.as_old_mut().name[..path.len()].copy_from_slice(path.as_bytes());
                    h.set_cksum();
                    b.append(&h, std::io::empty()).unwrap();
                }
                _ => {
                    h.set_size(data.len() as u64);
                    h.as_old_mut().name[..path.len()].copy_from_slice(path.as_bytes());
                    h.set_cksum();
                    b.append(&h, *data).unwrap();
                }
            }
        }
        b.into_inner().unwrap()
    }

    #[test]
    fn a_layer_is_made_with_whiteouts_and_without_set_id_bits() {
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        let d = dest("ok");
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
        let outside = dest("outside");
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
        ] {
            let d = dest(name);
            let tar = stream(&entries);
            assert!(unpack(&tar[..], &d, Limits::NONE).is_err(), "{name}");
            assert!(!outside.join("escaped").exists(), "{name}");
            assert!(!d.parent().unwrap().join("escaped").exists(), "{name}");
            std::fs::remove_dir_all(&d).unwrap();
        }
        std::fs::remove_dir_all(&outside).unwrap();
    }
}
