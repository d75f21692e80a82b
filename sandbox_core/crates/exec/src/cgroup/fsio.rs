//! Reads and writes of cgroup files, and the errors they become.

use super::*;

pub(super) fn isolation(step: Step, path: &Path, e: io::Error) -> SpawnError {
    SpawnError::Isolation {
        step,
        source: io::Error::new(e.kind(), format!("{}: {e}", path.display())),
    }
}

pub(super) fn setup_err(path: &str, source: io::Error) -> SetupError {
    SetupError::Cgroup {
        path: path.to_string(),
        source,
    }
}

/// mkdir; a leftover of the same name (a crashed agent with the same pid) is removed first.
pub(super) fn make_dir(dir: &Path) -> io::Result<()> {
    match fs::create_dir(dir) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            fs::remove_dir(dir)?;
            fs::create_dir(dir)
        }
        r => r,
    }
}

pub(super) fn write_file(path: &Path, value: &str) -> io::Result<()> {
    fs::OpenOptions::new()
        .write(true)
        .open(path)?
        .write_all(value.as_bytes())
}

pub(super) fn read_u64(path: &Path) -> Option<u64> {
    fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The whole content of an open cgroup file, read from offset 0 (the kernel regenerates it).
/// These files are produced in one go, so a read shorter than asked for is the end: no second
/// read just to see end-of-file.
pub(super) fn read_at_string(f: &fs::File) -> Option<String> {
    let mut buf = [0u8; 512];
    let mut n = 0;
    while n < buf.len() {
        match f.read_at(&mut buf[n..], n as u64) {
            Ok(0) => break,
            Ok(k) => {
                n += k;
                if n < buf.len() {
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    String::from_utf8(buf[..n].to_vec()).ok()
}

pub(super) fn read_at_u64(f: &fs::File) -> Option<u64> {
    read_at_string(f)?.trim().parse().ok()
}

/// Value of `key` in a flat-keyed file ("key value" per line).
pub(super) fn keyed(path: &Path, key: &str) -> Option<u64> {
    keyed_in(&fs::read_to_string(path).ok()?, key)
}

pub(super) fn keyed_in(s: &str, key: &str) -> Option<u64> {
    s.lines().find_map(|l| {
        let mut it = l.split_whitespace();
        (it.next() == Some(key))
            .then(|| it.next()?.parse().ok())
            .flatten()
    })
}
