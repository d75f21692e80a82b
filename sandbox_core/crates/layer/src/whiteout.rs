//! Deletions in both forms a layer takes. In an OCI layer tar (the image spec's "whiteouts") an
//! entry `.wh.<name>` deletes `<name>` of the layers beneath, and `.wh..wh..opq` in a directory
//! hides everything the layers beneath have in it. In an overlay's lower layer the first is a
//! character device 0/0 named `<name>`, the second the directory's `trusted.overlay.opaque`
//! attribute set to `y`.

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use crate::safe::{bad, c_path};

/// Prefix of a whiteout entry's name in a tar.
pub const PREFIX: &str = ".wh.";
/// Name of an opaque directory's marker entry in a tar.
pub const OPAQUE: &str = ".wh..wh..opq";
/// The overlay attribute of an opaque directory.
pub const OPAQUE_XATTR: &str = "trusted.overlay.opaque";

/// What a tar entry's last name component marks.
#[derive(Debug, PartialEq, Eq)]
pub enum Marker<'a> {
    /// Its directory hides the layers beneath (`.wh..wh..opq`).
    Opaque,
    /// The named entry of its directory is deleted (`.wh.<name>`).
    Deletes(&'a OsStr),
}

/// Whether `name` (one component) is a marker's: no entry of a layer tar by that name is a file.
pub fn is_marker(name: &OsStr) -> bool {
    name.as_bytes().starts_with(PREFIX.as_bytes())
}

/// The marker `name` (one component) is, if any; a whiteout of no name, `.` or `..` is refused.
pub fn marker(name: &OsStr) -> io::Result<Option<Marker<'_>>> {
    if name.as_bytes() == OPAQUE.as_bytes() {
        return Ok(Some(Marker::Opaque));
    }
    match name.as_bytes().strip_prefix(PREFIX.as_bytes()) {
        Some(b"" | b"." | b"..") => Err(bad(format!(
            "a whiteout of no entry: {}",
            name.to_string_lossy()
        ))),
        Some(hidden) => Ok(Some(Marker::Deletes(OsStr::from_bytes(hidden)))),
        None => Ok(None),
    }
}

/// The tar name of the whiteout that deletes `name`.
pub fn deleting(name: &OsStr) -> OsString {
    let mut out = OsString::from(PREFIX);
    out.push(name);
    out
}

/// Whether `m` (not followed) is an overlay whiteout.
pub fn is_whiteout(m: &std::fs::Metadata) -> bool {
    m.file_type().is_char_device() && m.rdev() == 0
}

/// Makes an overlay whiteout at `p` (nothing may be there).
pub fn make_whiteout(p: &Path) -> io::Result<()> {
    let c = c_path(p)?;
    // SAFETY: mknod of a 0/0 character device at a valid C string.
    if unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn attr_name() -> CString {
    CString::new(OPAQUE_XATTR).unwrap_or_default()
}

/// Whether the directory `dir` (not followed) is opaque.
pub fn is_opaque(dir: &Path) -> bool {
    let Ok(c) = c_path(dir) else {
        return false;
    };
    let mut v = [0u8; 4];
    // SAFETY: lgetxattr into a buffer of the size we pass, at valid C strings.
    let n = unsafe {
        libc::lgetxattr(
            c.as_ptr(),
            attr_name().as_ptr(),
            v.as_mut_ptr() as *mut libc::c_void,
            v.len(),
        )
    };
    n == 1 && v[0] == b'y'
}

/// Marks the directory `dir` (not followed) opaque.
pub fn make_opaque(dir: &Path) -> io::Result<()> {
    let c = c_path(dir)?;
    // SAFETY: lsetxattr with valid C strings and a one-byte value.
    let rc = unsafe {
        libc::lsetxattr(
            c.as_ptr(),
            attr_name().as_ptr(),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_are_told_from_names() {
        fn m(s: &str) -> Result<Option<Marker<'_>>, ()> {
            marker(OsStr::new(s)).map_err(|_| ())
        }
        assert_eq!(m(".wh..wh..opq"), Ok(Some(Marker::Opaque)));
        assert_eq!(m(".wh.gone"), Ok(Some(Marker::Deletes(OsStr::new("gone")))));
        assert_eq!(m("file"), Ok(None));
        for refused in [".wh.", ".wh..", ".wh..."] {
            assert!(m(refused).is_err(), "{refused}");
        }
        assert_eq!(deleting(OsStr::new("gone")), OsString::from(".wh.gone"));
        assert!(is_marker(OsStr::new(".wh.x")) && !is_marker(OsStr::new("x.wh.")));
    }
}
