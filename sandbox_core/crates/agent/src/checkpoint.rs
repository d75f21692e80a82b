//! The `Checkpoint` call's stream: the sandbox's changes (every writable place's upper layer, or its
//! whole disk where nothing lies beneath, `setup::layers`) as one tar, in a fixed order (places as
//! recorded, names sorted), so the same state gives the same bytes and so the same digest.
//!
//! What a program left there cannot reach outside through it: the walk opens every name relative
//! to its directory's descriptor without following symlinks (a symlink is stored as one, its
//! target as text), reads only regular files and directories (a FIFO, socket or device is left
//! out; a name swapped for one between look and open is found by the descriptor's own type), and
//! stores a hard link's data as a file of its own. Overlay deletions become OCI whiteouts; a
//! program's own file named `.wh.*` is left out (it would read as one). Ids are the programs'.

use std::ffi::{CStr, CString, OsStr};
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use sandbox_layer::whiteout::{self, OPAQUE};

use crate::setup::layers::Changes;

/// Ids of a user namespace (the programs' ids 0..65535 are the host's id base + the same).
const IDS: u32 = 65536;

/// Writes the tar of `changes` to `out` and returns how many entries it holds: the sandbox's own
/// places, or with `volume` only the layered volume at that path, its names relative to it (a
/// layer of the volume's directory, wherever it is mounted next). `NotFound` when no layered
/// volume is there.
pub fn write(changes: &Changes, volume: Option<&Path>, out: impl Write) -> io::Result<u64> {
    let chosen: Vec<(&Path, &crate::setup::layers::Place)> = match volume {
        Some(at) => changes
            .places
            .iter()
            .filter(|p| p.volume && p.path == at)
            .map(|p| (Path::new(""), p))
            .collect(),
        None => changes
            .places
            .iter()
            .filter(|p| !p.volume)
            .map(|p| (p.path.strip_prefix("/").unwrap_or(&p.path), p))
            .collect(),
    };
    if let (Some(at), true) = (volume, chosen.is_empty()) {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("no layered volume at {}", at.display()),
        ));
    }
    let mut w = Walk {
        tar: tar::Builder::new(out),
        id_base: changes.id_base,
        entries: 0,
        dev: 0,
    };
    for (rel, place) in chosen {
        let dir = place.changes.as_raw_fd();
        let st = fstat(dir)?;
        w.dev = st.st_dev;
        if !rel.as_os_str().is_empty() {
            w.header(rel, &st, tar::EntryType::Directory, 0, io::empty())?;
        }
        w.dir(dir, rel)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", place.path.display())))?;
    }
    w.tar.finish()?;
    Ok(w.entries)
}

struct Walk<W: Write> {
    tar: tar::Builder<W>,
    id_base: u32,
    entries: u64,
    /// The device of the place being walked: what is mounted within it is not its.
    dev: libc::dev_t,
}

impl<W: Write> Walk<W> {
    /// The programs' id of host id `id` (an id outside their range is root's).
    fn inside(&self, id: u32) -> u64 {
        match self.id_base {
            0 => u64::from(id),
            base if id >= base && id - base < IDS => u64::from(id - base),
            _ => 0,
        }
    }

    fn header(
        &mut self,
        path: &Path,
        st: &libc::stat,
        kind: tar::EntryType,
        size: u64,
        data: impl Read,
    ) -> io::Result<()> {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_mode(st.st_mode & 0o7777);
        h.set_uid(self.inside(st.st_uid));
        h.set_gid(self.inside(st.st_gid));
        h.set_mtime(st.st_mtime.max(0) as u64);
        h.set_size(size);
        self.entries += 1;
        self.tar.append_data(&mut h, path, data)
    }

    /// A file with holes as a GNU sparse entry: its data segments only, the map of them in the
    /// header (four) and in extension blocks after it (21 each), so a hole costs no byte of the
    /// stream nor of the layer it is unpacked into.
    fn sparse(
        &mut self,
        path: &Path,
        st: &libc::stat,
        file: std::fs::File,
        size: u64,
        map: Vec<(u64, u64)>,
    ) -> io::Result<()> {
        // The last entry of a map that ends in a hole: zero bytes at the end (the real size).
        let mut entries = map.clone();
        if entries.last().is_none_or(|(o, l)| o + l < size) {
            entries.push((size, 0));
        }
        let stored: u64 = map.iter().map(|(_, l)| l).sum();
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::GNUSparse);
        h.set_mode(st.st_mode & 0o7777);
        h.set_uid(self.inside(st.st_uid));
        h.set_gid(self.inside(st.st_gid));
        h.set_mtime(st.st_mtime.max(0) as u64);
        h.set_size(stored);
        let mut ext: Vec<u8> = Vec::new();
        {
            let gnu = h
                .as_gnu_mut()
                .ok_or_else(|| io::Error::other("a GNU header"))?;
            octal(&mut gnu.realsize, size);
            for (slot, (off, len)) in gnu.sparse.iter_mut().zip(&entries) {
                octal(&mut slot.offset, *off);
                octal(&mut slot.numbytes, *len);
            }
            let rest: Vec<&[(u64, u64)]> =
                entries.get(4..).unwrap_or_default().chunks(21).collect();
            gnu.isextended[0] = u8::from(!rest.is_empty());
            for (i, chunk) in rest.iter().enumerate() {
                let mut block = tar::GnuExtSparseHeader::new();
                for (slot, (off, len)) in block.sparse.iter_mut().zip(chunk.iter()) {
                    octal(&mut slot.offset, *off);
                    octal(&mut slot.numbytes, *len);
                }
                block.isextended[0] = u8::from(i + 1 < rest.len());
                ext.extend_from_slice(block.as_bytes());
            }
        }
        let data = io::Cursor::new(ext).chain(Segments {
            file,
            map,
            at: 0,
            done: 0,
        });
        self.entries += 1;
        // The extension blocks go right after the header, before the data; the header's size
        // counts the data alone (the padding that follows counts both, whole blocks and data).
        self.tar.append_data(&mut h, path, data)
    }

    fn marker(&mut self, path: &Path) -> io::Result<()> {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Regular);
        h.set_mode(0o600);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(0);
        h.set_size(0);
        self.entries += 1;
        self.tar.append_data(&mut h, path, io::empty())
    }

    fn dir(&mut self, dir: RawFd, rel: &Path) -> io::Result<()> {
        if !rel.as_os_str().is_empty() && opaque(dir) {
            self.marker(&rel.join(OPAQUE))?;
        }
        for name in names(dir)? {
            if whiteout::is_marker(OsStr::from_bytes(name.as_bytes())) {
                continue;
            }
            let path = rel.join(OsStr::from_bytes(name.as_bytes()));
            let Some(st) = fstatat(dir, &name)? else {
                continue; // gone meanwhile
            };
            match st.st_mode & libc::S_IFMT {
                libc::S_IFDIR => {
                    let Some(sub) = open_at(dir, &name, libc::O_DIRECTORY)? else {
                        continue;
                    };
                    let st = fstat(sub.as_raw_fd())?;
                    if st.st_mode & libc::S_IFMT != libc::S_IFDIR || st.st_dev != self.dev {
                        continue;
                    }
                    self.header(&path, &st, tar::EntryType::Directory, 0, io::empty())?;
                    self.dir(sub.as_raw_fd(), &path).map_err(|e| {
                        io::Error::new(e.kind(), format!("{}: {e}", path.display()))
                    })?;
                }
                libc::S_IFREG => {
                    let Some(file) = open_at(dir, &name, libc::O_NONBLOCK | libc::O_NOCTTY)? else {
                        continue;
                    };
                    let st = fstat(file.as_raw_fd())?;
                    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
                        continue;
                    }
                    let size = st.st_size.max(0) as u64;
                    let file = std::fs::File::from(file);
                    let map = data_map(&file, size);
                    if map.len() == 1 && map[0] == (0, size) {
                        let data = Exactly { file, left: size };
                        self.header(&path, &st, tar::EntryType::Regular, size, data)?;
                    } else {
                        self.sparse(&path, &st, file, size, map)?;
                    }
                }
                libc::S_IFLNK => {
                    let Some(target) = readlinkat(dir, &name)? else {
                        continue;
                    };
                    let mut h = tar::Header::new_gnu();
                    h.set_entry_type(tar::EntryType::Symlink);
                    h.set_mode(0o777);
                    h.set_uid(self.inside(st.st_uid));
                    h.set_gid(self.inside(st.st_gid));
                    h.set_mtime(st.st_mtime.max(0) as u64);
                    h.set_size(0);
                    self.entries += 1;
                    self.tar.append_link(&mut h, &path, &target)?;
                }
                libc::S_IFCHR if st.st_rdev == 0 => {
                    let marker = whiteout::deleting(OsStr::from_bytes(name.as_bytes()));
                    self.marker(&rel.join(marker))?;
                }
                _ => {} // sockets, FIFOs, devices
            }
        }
        Ok(())
    }
}

/// A file's first `left` bytes: what it held when looked at, zeros where it shrank meanwhile.
struct Exactly {
    file: std::fs::File,
    left: u64,
}

impl Read for Exactly {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let want = buf.len().min(self.left as usize);
        if want == 0 {
            return Ok(0);
        }
        let n = match self.file.read(&mut buf[..want])? {
            0 => {
                buf[..want].fill(0);
                want
            }
            n => n,
        };
        self.left -= n as u64;
        Ok(n)
    }
}

/// Segments of a sparse file's map at most: a file of more is stored with its smallest holes
/// filled (as zeros), so a map never costs more than a few blocks of headers.
const MAX_SEGMENTS: usize = 4096;
/// Tar's block: every data segment but the last starts and ends on one (the readers' rule).
const BLOCK: u64 = 512;

/// The data segments of `file` (its first `size` bytes) as `(offset, length)`, on tar's blocks,
/// by SEEK_DATA / SEEK_HOLE; the whole file as one where the file system cannot tell.
fn data_map(file: &std::fs::File, size: u64) -> Vec<(u64, u64)> {
    let whole = vec![(0, size)];
    if size == 0 {
        return whole;
    }
    let fd = file.as_raw_fd();
    let mut map: Vec<(u64, u64)> = Vec::new();
    let mut at = 0u64;
    while at < size {
        // SAFETY: lseek on a descriptor we hold.
        let data = unsafe { libc::lseek(fd, at as libc::off_t, libc::SEEK_DATA) };
        if data < 0 {
            if io::Error::last_os_error().raw_os_error() == Some(libc::ENXIO) {
                break; // only a hole from here to the end
            }
            return whole;
        }
        // SAFETY: as above.
        let hole = unsafe { libc::lseek(fd, data, libc::SEEK_HOLE) };
        if hole < 0 {
            return whole;
        }
        let start = (data as u64 / BLOCK * BLOCK).min(size);
        let end = (hole as u64)
            .div_ceil(BLOCK)
            .saturating_mul(BLOCK)
            .min(size);
        if end <= start {
            break;
        }
        match map.last_mut() {
            Some((o, l)) if *o + *l >= start => *l = end.max(*o + *l) - *o,
            _ => map.push((start, end - start)),
        }
        at = end;
    }
    // SAFETY: back to the start for the reads (they use pread, but leave no surprise).
    unsafe { libc::lseek(fd, 0, libc::SEEK_SET) };
    while map.len() > MAX_SEGMENTS {
        // Fill the smallest hole.
        let i = (1..map.len())
            .min_by_key(|&i| map[i].0 - (map[i - 1].0 + map[i - 1].1))
            .unwrap_or(1);
        let (o, l) = map.remove(i);
        let prev = &mut map[i - 1];
        prev.1 = o + l - prev.0;
    }
    map
}

/// `v` as tar's octal field of `field`'s width (NUL-terminated).
fn octal(field: &mut [u8], v: u64) {
    let width = field.len() - 1;
    let s = format!("{v:0width$o}");
    let s = s.as_bytes();
    let s = &s[s.len().saturating_sub(width)..];
    field[..width].copy_from_slice(s);
    field[width] = 0;
}

/// The data of a sparse file's segments, one after the other: zeros where the file shrank since
/// it was mapped.
struct Segments {
    file: std::fs::File,
    map: Vec<(u64, u64)>,
    /// The segment being read, and how much of it is done.
    at: usize,
    done: u64,
}

impl Read for Segments {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        use std::os::unix::fs::FileExt;
        while let Some(&(off, len)) = self.map.get(self.at) {
            if self.done == len {
                self.at += 1;
                self.done = 0;
                continue;
            }
            let want = buf.len().min((len - self.done) as usize);
            let n = match self.file.read_at(&mut buf[..want], off + self.done)? {
                0 => {
                    buf[..want].fill(0);
                    want
                }
                n => n,
            };
            self.done += n as u64;
            return Ok(n);
        }
        Ok(0)
    }
}

/// Whether overlay marked `dir` opaque (it hides the layers' directory of that name).
fn opaque(dir: RawFd) -> bool {
    [whiteout::OPAQUE_XATTR, "user.overlay.opaque"]
        .iter()
        .any(|attr| {
            let attr = CString::new(*attr).unwrap_or_default();
            let mut v = [0u8; 4];
            // SAFETY: fgetxattr into a buffer of the size we pass.
            let n = unsafe {
                libc::fgetxattr(
                    dir,
                    attr.as_ptr(),
                    v.as_mut_ptr() as *mut libc::c_void,
                    v.len(),
                )
            };
            n >= 1 && v[0] == b'y'
        })
}

/// The names in `dir`, sorted (`.` and `..` left out).
fn names(dir: RawFd) -> io::Result<Vec<CString>> {
    // SAFETY: dup of a descriptor we hold; fdopendir takes the copy and closedir closes it.
    let copy = unsafe { libc::fcntl(dir, libc::F_DUPFD_CLOEXEC, 0) };
    if copy < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `copy` is ours and a directory.
    let d = unsafe { libc::fdopendir(copy) };
    if d.is_null() {
        let e = io::Error::last_os_error();
        // SAFETY: fdopendir failed, so the copy is still ours to close.
        unsafe { libc::close(copy) };
        return Err(e);
    }
    // fdopendir continues from the descriptor's offset, which a copy shares: start over.
    // SAFETY: a stream we just opened.
    unsafe { libc::rewinddir(d) };
    let mut out = Vec::new();
    loop {
        // SAFETY: readdir on our open stream; the entry is valid until the next call.
        let e = unsafe { libc::readdir(d) };
        if e.is_null() {
            break;
        }
        // SAFETY: d_name is NUL-terminated.
        let name = unsafe { CStr::from_ptr((*e).d_name.as_ptr()) };
        if name.to_bytes() != b"." && name.to_bytes() != b".." {
            out.push(name.to_owned());
        }
    }
    // SAFETY: closes the stream and the copy.
    unsafe { libc::closedir(d) };
    out.sort();
    Ok(out)
}

fn fstat(fd: RawFd) -> io::Result<libc::stat> {
    // SAFETY: fstat into a zeroed stat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st)
}

/// Whether `e` says a name moved on since the walk looked at it: gone, a symlink, or no longer a
/// directory (a program renaming its own files meanwhile: the walk takes it as gone).
fn gone(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOENT) | Some(libc::ELOOP) | Some(libc::ENOTDIR)
    )
}

/// `name` in `dir`, never followed (None: gone meanwhile).
fn fstatat(dir: RawFd, name: &CStr) -> io::Result<Option<libc::stat>> {
    // SAFETY: fstatat into a zeroed stat, with a valid C string.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstatat(dir, name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) } != 0 {
        let e = io::Error::last_os_error();
        return if gone(&e) { Ok(None) } else { Err(e) };
    }
    Ok(Some(st))
}

/// Opens `name` in `dir` for reading, never through a symlink (None: gone, or now a symlink).
fn open_at(dir: RawFd, name: &CStr, flags: libc::c_int) -> io::Result<Option<OwnedFd>> {
    // SAFETY: openat with a valid C string; the descriptor is ours.
    let fd = unsafe {
        libc::openat(
            dir,
            name.as_ptr(),
            libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_CLOEXEC | flags,
        )
    };
    if fd < 0 {
        let e = io::Error::last_os_error();
        return if gone(&e) { Ok(None) } else { Err(e) };
    }
    // SAFETY: just returned by the kernel.
    Ok(Some(unsafe { OwnedFd::from_raw_fd(fd) }))
}

fn readlinkat(dir: RawFd, name: &CStr) -> io::Result<Option<PathBuf>> {
    let mut buf = vec![0u8; libc::PATH_MAX as usize];
    // SAFETY: readlinkat into a buffer of the size we pass.
    let n = unsafe {
        libc::readlinkat(
            dir,
            name.as_ptr(),
            buf.as_mut_ptr() as *mut libc::c_char,
            buf.len(),
        )
    };
    if n < 0 {
        let e = io::Error::last_os_error();
        return if gone(&e) || e.raw_os_error() == Some(libc::EINVAL) {
            Ok(None)
        } else {
            Err(e)
        };
    }
    buf.truncate(n as usize);
    Ok(Some(PathBuf::from(OsStr::from_bytes(&buf))))
}

/// Chunks of the stream, sent as they fill (a bounded channel: the walk waits for the caller).
pub struct Chunks {
    tx: tokio::sync::mpsc::Sender<Result<sandbox_proto::FileChunk, tonic::Status>>,
    buf: Vec<u8>,
    chunk: usize,
    offset: u64,
}

/// What a chunk holds by default.
pub const DEFAULT_CHUNK: usize = 1 << 20;

impl Chunks {
    pub fn new(
        tx: tokio::sync::mpsc::Sender<Result<sandbox_proto::FileChunk, tonic::Status>>,
        chunk: usize,
    ) -> Self {
        Chunks {
            tx,
            buf: Vec::with_capacity(chunk),
            chunk,
            offset: 0,
        }
    }

    fn send(&mut self) -> io::Result<()> {
        let data = std::mem::replace(&mut self.buf, Vec::with_capacity(self.chunk));
        let n = data.len() as u64;
        self.tx
            .blocking_send(Ok(sandbox_proto::FileChunk {
                data: data.into(),
                offset: self.offset,
                total_size: 0,
            }))
            .map_err(|_| io::Error::from(io::ErrorKind::BrokenPipe))?;
        self.offset += n;
        Ok(())
    }
}

impl Write for Chunks {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let n = data.len().min(self.chunk - self.buf.len());
        self.buf.extend_from_slice(&data[..n]);
        if self.buf.len() == self.chunk {
            self.send()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        self.send()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::setup::layers::{open_dir, Place};

    fn entries(tar: &[u8]) -> Vec<(String, tar::EntryType)> {
        let mut a = tar::Archive::new(tar);
        a.entries()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (
                    e.path().unwrap().display().to_string(),
                    e.header().entry_type(),
                )
            })
            .collect()
    }

    #[test]
    fn a_place_is_walked_in_order_without_fifos_or_whiteout_look_alikes() {
        let dir = std::env::temp_dir().join(format!("cp-walk-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("b/c")).unwrap();
        std::fs::write(dir.join("b/c/file"), b"data").unwrap();
        std::fs::write(dir.join("a"), b"").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", dir.join("link")).unwrap();
        std::fs::write(dir.join(".wh.fake"), b"").unwrap();
        let path = std::ffi::CString::new(dir.join("fifo").as_os_str().as_bytes()).unwrap();
        // SAFETY: mkfifo with a valid C string.
        assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0);
        let changes = Changes {
            places: vec![
                Place {
                    path: PathBuf::from("/work"),
                    changes: open_dir(&dir).unwrap(),
                    volume: false,
                },
                Place {
                    path: PathBuf::from("/data"),
                    changes: open_dir(&dir.join("b")).unwrap(),
                    volume: true,
                },
            ],
            id_base: 0,
        };
        let mut out = Vec::new();
        let n = write(&changes, None, &mut out).unwrap();
        let got = entries(&out);
        assert_eq!(n as usize, got.len());
        let names: Vec<_> = got.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(
            names,
            [
                "work",
                "work/a",
                "work/b",
                "work/b/c",
                "work/b/c/file",
                "work/link"
            ]
        );
        assert_eq!(got[5].1, tar::EntryType::Symlink);
        // The same state is the same stream.
        let mut again = Vec::new();
        write(&changes, None, &mut again).unwrap();
        assert_eq!(out, again);
        // A layered volume is walked only when asked for, its names relative to it.
        let mut volume = Vec::new();
        write(&changes, Some(Path::new("/data")), &mut volume).unwrap();
        let names: Vec<_> = entries(&volume).into_iter().map(|(p, _)| p).collect();
        assert_eq!(names, ["c", "c/file"]);
        let missing = write(&changes, Some(Path::new("/work")), Vec::new()).unwrap_err();
        assert_eq!(missing.kind(), io::ErrorKind::NotFound);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Holes stay holes from the walk to the layer: a file of 64 MiB with two small writes (one
    /// at its end) and one of 200 segments cost the stream and the layer about what they
    /// allocate, and read back the same bytes.
    #[test]
    fn holes_are_kept_from_the_walk_to_the_layer() {
        use std::os::unix::fs::{FileExt, MetadataExt};
        let dir = std::env::temp_dir().join(format!("cp-sparse-{}", std::process::id()));
        let dest = std::env::temp_dir().join(format!("cp-sparse-layer-{}", std::process::id()));
        for d in [&dir, &dest] {
            let _ = std::fs::remove_dir_all(d);
            std::fs::create_dir_all(d).unwrap();
        }
        let big = std::fs::File::create(dir.join("big")).unwrap();
        big.write_at(b"head", 4096).unwrap();
        big.write_at(b"x", (64 << 20) - 1).unwrap();
        let holey = std::fs::File::create(dir.join("holey")).unwrap();
        for i in 0..200u64 {
            holey.write_at(&[i as u8 + 1; 100], i * 65536 + 7).unwrap();
        }
        holey.set_len(200 * 65536 + 4096).unwrap(); // ends in a hole
        std::fs::write(dir.join("plain"), b"plain data").unwrap();
        let changes = Changes {
            places: vec![Place {
                path: PathBuf::from("/work"),
                changes: open_dir(&dir).unwrap(),
                volume: false,
            }],
            id_base: 0,
        };
        let mut out = Vec::new();
        write(&changes, None, &mut out).unwrap();
        assert!(
            out.len() < 1 << 20,
            "the stream holds holes: {} bytes",
            out.len()
        );
        let u = sandbox_layer::unpack(&out[..], &dest, sandbox_layer::Limits::NONE)
            .unwrap_or_else(|e| panic!("{e:?}"));
        assert!(u.allocated < 2 << 20, "the layer allocates {}", u.allocated);
        for name in ["big", "holey", "plain"] {
            let (a, b) = (dir.join(name), dest.join("work").join(name));
            assert_eq!(
                std::fs::read(&a).unwrap(),
                std::fs::read(&b).unwrap(),
                "{name}"
            );
            let (ma, mb) = (
                std::fs::metadata(&a).unwrap(),
                std::fs::metadata(&b).unwrap(),
            );
            assert_eq!(ma.len(), mb.len(), "{name}");
            assert!(
                mb.blocks() <= 2 * ma.blocks().max(8),
                "{name}: {} blocks",
                mb.blocks()
            );
        }
        // A bound passed while the stream runs stops it, naming the bound.
        let small = sandbox_layer::Limits {
            max_bytes: 64 << 10,
            max_entries: u64::MAX,
        };
        let _ = std::fs::remove_dir_all(&dest);
        std::fs::create_dir_all(&dest).unwrap();
        let e = sandbox_layer::unpack(&out[..], &dest, small).err().unwrap();
        assert_eq!(e.kind(), io::ErrorKind::FileTooLarge);
        assert!(e.to_string().contains("65536 bytes"), "{e}");
        let few = sandbox_layer::Limits {
            max_bytes: u64::MAX,
            max_entries: 2,
        };
        let _ = std::fs::remove_dir_all(&dest);
        std::fs::create_dir_all(&dest).unwrap();
        let e = sandbox_layer::unpack(&out[..], &dest, few).err().unwrap();
        assert_eq!(e.kind(), io::ErrorKind::QuotaExceeded);
        for d in [&dir, &dest] {
            std::fs::remove_dir_all(d).unwrap();
        }
    }

    #[test]
    fn a_map_of_many_segments_is_bounded() {
        let dir = std::env::temp_dir().join(format!("cp-map-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let f = std::fs::File::create(dir.join("f")).unwrap();
        use std::os::unix::fs::FileExt;
        let n = MAX_SEGMENTS as u64 + 100;
        for i in 0..n {
            f.write_at(b"y", i * 8192).unwrap();
        }
        let size = f.metadata().unwrap().len();
        let map = data_map(&f, size);
        assert!(map.len() <= MAX_SEGMENTS, "{}", map.len());
        assert!(map.iter().all(|(o, _)| o % BLOCK == 0));
        assert_eq!(map.last().map(|(o, l)| o + l), Some(size));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
