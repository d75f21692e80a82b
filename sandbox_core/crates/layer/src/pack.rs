//! A layer directory written as an OCI image layer: a gzipped tar in which overlay whiteouts are
//! `.wh.<name>` entries and opaque directories hold a `.wh..wh..opq`, as a registry and a
//! container runtime expect them.
//!
//! Only what a layer holds is written: directories, regular files, symlinks and whiteouts, with
//! the ids and modes the programs gave them (set-id bits dropped), names sorted and times the
//! layer's own, in a gzip stream without a name or a time: one layer is one tar, and one blob.
//!
//! `Placement` moves entries: `relocate` the contents of some directories elsewhere in the tar
//! (the directory itself stays, empty), `under` the whole layer below a directory. Directories
//! above a moved place that the layer does not hold are written root-owned, 0755.

use std::collections::{HashMap, HashSet};
use std::fs::{File, Metadata};
use std::io::{self, BufWriter, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::digest::{named, HashingWriter};
use crate::safe::{checked, sorted_names};
use crate::whiteout;

/// A layer written as a blob: its digest (of the gzipped bytes, what a registry names it by), its
/// `diff_id` (of the tar, what an image's config lists), both `sha256:<hex>`, and its size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packed {
    pub digest: String,
    pub diff_id: String,
    pub size: u64,
}

/// Where `pack` puts a layer's entries in the tar.
#[derive(Debug, Clone, Default)]
pub struct Placement {
    /// Directories of the layer (relative to its top) whose contents go to the path given (from
    /// the tar's top).
    pub relocate: HashMap<PathBuf, PathBuf>,
    /// The directory the whole layer goes below ("": the tar's top); written with the mode and
    /// ids of the layer's top.
    pub under: PathBuf,
}

/// Writes the layer at `layer` to `dest` as a gzipped OCI layer tar, placed by `placement`.
pub fn pack(layer: &Path, dest: &Path, placement: &Placement) -> io::Result<Packed> {
    let mut relocate = HashMap::new();
    for (from, to) in &placement.relocate {
        relocate.insert(checked(from)?, checked(to)?);
    }
    let under = if placement.under.as_os_str().is_empty() {
        PathBuf::new()
    } else {
        checked(&placement.under)?
    };
    let outer = HashingWriter::new(BufWriter::new(File::create(dest)?));
    // Level 2 of flate2's deflate: about the size zlib's fastest level gives, in about its time.
    let gz = flate2::GzBuilder::new()
        .mtime(0)
        .write(outer, flate2::Compression::new(2));
    let mut w = Writer {
        tar: tar::Builder::new(HashingWriter::new(gz)),
        made: HashSet::new(),
        relocate,
    };
    if !under.as_os_str().is_empty() {
        let top = std::fs::metadata(layer)?;
        w.ancestors(&under, mtime(&top))?;
        w.dir(&under, &top, top.mode() & 0o7777)?;
    }
    w.tree(layer, Path::new(""), &under)?;
    let (gz, diff_id, _) = w.tar.into_inner()?.finish();
    let (file, digest, size) = gz.finish()?.finish();
    file.into_inner().map_err(|e| e.into_error())?;
    Ok(Packed {
        digest: named(digest),
        diff_id: named(diff_id),
        size,
    })
}

struct Writer<W: Write> {
    tar: tar::Builder<W>,
    /// Directories written for a moved place's ancestors (each once).
    made: HashSet<PathBuf>,
    relocate: HashMap<PathBuf, PathBuf>,
}

fn mtime(m: &Metadata) -> u64 {
    m.mtime().max(0) as u64
}

fn header(kind: tar::EntryType, mode: u32, uid: u32, gid: u32, mtime: u64) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(kind);
    h.set_mode(mode);
    h.set_uid(uid.into());
    h.set_gid(gid.into());
    h.set_mtime(mtime);
    h.set_size(0);
    h
}

impl<W: Write> Writer<W> {
    /// The entries of `rel` (of the layer at `root`) as those of `out` in the tar.
    fn tree(&mut self, root: &Path, rel: &Path, out: &Path) -> io::Result<()> {
        let here = root.join(rel);
        for name in sorted_names(&here)? {
            let (src, at, to) = (rel.join(&name), here.join(&name), out.join(&name));
            let m = std::fs::symlink_metadata(&at)?;
            if whiteout::is_whiteout(&m) {
                self.marker(&out.join(whiteout::deleting(&name)), mtime(&m))?;
                continue;
            }
            let mode = m.mode() & 0o7777 & !(libc::S_ISUID | libc::S_ISGID);
            let ft = m.file_type();
            if ft.is_dir() {
                self.dir(&to, &m, mode)?;
                let mut into = to;
                if let Some(target) = self.relocate.get(&src).cloned() {
                    self.ancestors(&target, mtime(&m))?;
                    self.dir(&target, &m, mode)?;
                    into = target;
                }
                if whiteout::is_opaque(&at) {
                    self.marker(&into.join(whiteout::OPAQUE), mtime(&m))?;
                }
                self.tree(root, &src, &into)?;
            } else if ft.is_symlink() {
                let target = std::fs::read_link(&at)?;
                let mut h = header(tar::EntryType::Symlink, mode, m.uid(), m.gid(), mtime(&m));
                self.tar.append_link(&mut h, &to, &target)?;
            } else if ft.is_file() {
                let file = std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_NOFOLLOW)
                    .open(&at)?;
                let mut h = header(tar::EntryType::Regular, mode, m.uid(), m.gid(), mtime(&m));
                h.set_size(m.len());
                let data = Exactly {
                    file,
                    left: m.len(),
                };
                self.tar.append_data(&mut h, &to, data)?;
            }
            // Anything else is not of a layer (the agent's stream never makes one): left out.
        }
        Ok(())
    }

    fn dir(&mut self, to: &Path, m: &Metadata, mode: u32) -> io::Result<()> {
        let mut h = header(tar::EntryType::Directory, mode, m.uid(), m.gid(), mtime(m));
        self.tar.append_data(&mut h, to, io::empty())
    }

    /// Directory entries for the ancestors of `path` not written yet (root-owned, 0755).
    fn ancestors(&mut self, path: &Path, mtime: u64) -> io::Result<()> {
        let mut above: Vec<&Path> = path.ancestors().skip(1).collect();
        above.reverse();
        for d in above {
            if d.as_os_str().is_empty() || !self.made.insert(d.to_path_buf()) {
                continue;
            }
            let mut h = header(tar::EntryType::Directory, 0o755, 0, 0, mtime);
            self.tar.append_data(&mut h, d, io::empty())?;
        }
        Ok(())
    }

    fn marker(&mut self, name: &Path, mtime: u64) -> io::Result<()> {
        let mut h = header(tar::EntryType::Regular, 0o644, 0, 0, mtime);
        self.tar.append_data(&mut h, name, io::empty())
    }
}

/// A file's first `left` bytes; a file that is shorter is an error (its header told its size).
struct Exactly {
    file: File,
    left: u64,
}

impl Read for Exactly {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 {
            return Ok(0);
        }
        let want = buf.len().min(self.left.min(usize::MAX as u64) as usize);
        let n = self.file.read(&mut buf[..want])?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "a layer's file shrank while it was written",
            ));
        }
        self.left -= n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{scratch, touch, tree};
    use crate::unpack::{unpack, Limits};
    use sha2::{Digest, Sha256};
    use std::collections::BTreeMap;
    use std::os::unix::fs::PermissionsExt;

    /// A layer with a file, a set-uid program, a symlink, whiteouts, an opaque directory and a
    /// FIFO (not of a layer).
    fn layer(root: &Path) {
        std::fs::create_dir_all(root.join("etc")).unwrap();
        std::fs::write(root.join("etc/conf"), b"c\n").unwrap();
        whiteout::make_whiteout(&root.join("etc/gone")).unwrap();
        std::fs::create_dir_all(root.join("opt/fresh")).unwrap();
        whiteout::make_opaque(&root.join("opt/fresh")).unwrap();
        std::fs::write(root.join("opt/fresh/f"), b"f\n").unwrap();
        std::fs::create_dir(root.join("work")).unwrap();
        std::fs::write(root.join("work/a"), b"a\n").unwrap();
        whiteout::make_whiteout(&root.join("work/old")).unwrap();
        std::os::unix::fs::symlink("/etc/conf", root.join("work/link")).unwrap();
        std::fs::create_dir(root.join("bin")).unwrap();
        std::fs::write(root.join("bin/tool"), b"t\n").unwrap();
        std::fs::set_permissions(root.join("bin/tool"), PermissionsExt::from_mode(0o4755)).unwrap();
        std::os::unix::fs::lchown(root.join("bin/tool"), Some(1000), Some(1001)).unwrap();
        let fifo = crate::safe::c_path(&root.join("fifo")).unwrap();
        // SAFETY: mkfifo at a valid C string.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
        for p in [
            "etc/conf",
            "opt/fresh/f",
            "work/a",
            "bin/tool",
            "etc",
            "opt/fresh",
            "opt",
        ] {
            touch(&root.join(p), 1_600_000_000);
        }
        for p in ["work", "bin", ""] {
            touch(&root.join(p), 1_600_000_000);
        }
    }

    /// The tar of a blob: each entry's (kind, mode, uid, data or link target), by name.
    fn entries(blob: &Path) -> BTreeMap<String, (tar::EntryType, u32, u64, Vec<u8>)> {
        let gz = flate2::read::GzDecoder::new(File::open(blob).unwrap());
        let mut out = BTreeMap::new();
        for e in tar::Archive::new(gz).entries().unwrap() {
            let mut e = e.unwrap();
            let name = e.path().unwrap().to_string_lossy().into_owned();
            let h = e.header().clone();
            let mut data = Vec::new();
            match e.link_name().unwrap() {
                Some(l) => data.extend_from_slice(l.to_string_lossy().as_bytes()),
                None => {
                    e.read_to_end(&mut data).unwrap();
                }
            }
            let kind = h.entry_type();
            assert!(out
                .insert(name, (kind, h.mode().unwrap(), h.uid().unwrap(), data))
                .is_none());
        }
        out
    }

    #[test]
    fn whiteouts_and_opaque_directories_become_markers_and_set_id_bits_go() {
        let d = scratch("pack");
        layer(&d.join("layer"));
        let placement = Placement {
            relocate: [("work".into(), ".places/work".into())].into(),
            under: PathBuf::new(),
        };
        let blob = pack(&d.join("layer"), &d.join("l.tar.gz"), &placement).unwrap();
        let raw = std::fs::read(d.join("l.tar.gz")).unwrap();
        let mut tar = Vec::new();
        flate2::read::GzDecoder::new(&raw[..])
            .read_to_end(&mut tar)
            .unwrap();
        assert_eq!(blob.digest, format!("sha256:{:x}", Sha256::digest(&raw)));
        assert_eq!(blob.diff_id, format!("sha256:{:x}", Sha256::digest(&tar)));
        assert_eq!(blob.size, raw.len() as u64);
        let got = entries(&d.join("l.tar.gz"));
        let names: Vec<&str> = got.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            [
                ".places",
                ".places/work",
                ".places/work/.wh.old",
                ".places/work/a",
                ".places/work/link",
                "bin",
                "bin/tool",
                "etc",
                "etc/.wh.gone",
                "etc/conf",
                "opt",
                "opt/fresh",
                "opt/fresh/.wh..wh..opq",
                "opt/fresh/f",
                "work",
            ]
        );
        let tool = &got["bin/tool"];
        assert_eq!((tool.1, tool.2, &tool.3[..]), (0o755, 1000, &b"t\n"[..]));
        assert_eq!(got[".places/work/link"].0, tar::EntryType::Symlink);
        assert_eq!(got[".places/work/link"].3, b"/etc/conf");
        assert_eq!(got["etc/.wh.gone"].0, tar::EntryType::Regular);
        // The same layer is the same blob.
        let again = pack(&d.join("layer"), &d.join("again.tar.gz"), &placement).unwrap();
        assert_eq!(again, blob);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_layer_below_a_directory() {
        let d = scratch("pack-under");
        layer(&d.join("layer"));
        std::fs::set_permissions(d.join("layer"), PermissionsExt::from_mode(0o750)).unwrap();
        let placement = Placement {
            relocate: HashMap::new(),
            under: ".volumes/0".into(),
        };
        pack(&d.join("layer"), &d.join("v.tar.gz"), &placement).unwrap();
        let got = entries(&d.join("v.tar.gz"));
        assert!(got
            .keys()
            .all(|n| n == ".volumes" || n.starts_with(".volumes/0")));
        assert_eq!(got[".volumes"].1, 0o755);
        assert_eq!(
            (got[".volumes/0"].0, got[".volumes/0"].1),
            (tar::EntryType::Directory, 0o750)
        );
        assert!(got.contains_key(".volumes/0/etc/.wh.gone"));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_packed_layer_unpacks_to_itself() {
        let d = scratch("round-trip");
        layer(&d.join("layer"));
        std::fs::remove_file(d.join("layer/fifo")).unwrap();
        std::fs::set_permissions(d.join("layer/bin/tool"), PermissionsExt::from_mode(0o755))
            .unwrap();
        touch(&d.join("layer/bin/tool"), 1_600_000_000);
        touch(&d.join("layer/bin"), 1_600_000_000);
        let blob = d.join("l.tar.gz");
        pack(&d.join("layer"), &blob, &Placement::default()).unwrap();
        std::fs::create_dir(d.join("back")).unwrap();
        let gz = flate2::read::GzDecoder::new(File::open(&blob).unwrap());
        unpack(gz, &d.join("back"), Limits::NONE).unwrap();
        assert_eq!(tree(&d.join("back")), tree(&d.join("layer")));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
