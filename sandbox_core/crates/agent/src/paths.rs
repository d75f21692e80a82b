//! Paths of the file calls, resolved so they can never leave the sandbox's writable roots.
//!
//! A path is relative to the work dir, or absolute under one of the allowed roots (the work dir,
//! and /tmp and /mnt when the agent built its own root: the sandbox's writable places).
//! Resolution goes through `openat2` with `RESOLVE_BENEATH`, so neither `..` nor a symlink
//! planted by user code can escape, and with `RESOLVE_NO_XDEV`, so no path crosses into another
//! mount (a root sandbox's `/` is a root, and `/proc`, `/sys`, `/dev` and read-only binds are
//! mounts beneath it).

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use crate::error::AgentError;

pub struct Roots {
    roots: Vec<PathBuf>,
}

/// A path split into the allowed root it lives under and the part beneath it.
pub struct Resolved {
    pub root: PathBuf,
    pub rel: PathBuf,
}

pub const MAX_PATH_LEN: usize = 4096;

impl Roots {
    pub fn new(roots: Vec<PathBuf>) -> Self {
        Roots { roots }
    }

    pub fn work_dir(&self) -> &Path {
        &self.roots[0]
    }

    pub fn resolve(&self, path: &str) -> Result<Resolved, AgentError> {
        if path.is_empty() {
            return Err(AgentError::Invalid("empty path".into()));
        }
        if path.len() > MAX_PATH_LEN || path.contains('\0') {
            return Err(AgentError::Invalid("path too long or contains NUL".into()));
        }
        let p = Path::new(path);
        let (root, rest) = if p.is_absolute() {
            let root = self
                .roots
                .iter()
                .filter(|r| p.starts_with(r))
                .max_by_key(|r| r.as_os_str().len())
                .ok_or_else(|| {
                    AgentError::PermissionDenied(format!(
                        "{path}: outside the sandbox's writable roots ({})",
                        self.roots
                            .iter()
                            .map(|r| r.display().to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ))
                })?;
            (
                root.clone(),
                p.strip_prefix(root).unwrap_or(Path::new("")).to_path_buf(),
            )
        } else {
            (self.roots[0].clone(), p.to_path_buf())
        };
        // Lexical check first, for a clear message; openat2 enforces it for real.
        let mut depth: i64 = 0;
        for c in rest.components() {
            match c {
                Component::ParentDir => depth -= 1,
                Component::Normal(_) => depth += 1,
                _ => {}
            }
            if depth < 0 {
                return Err(AgentError::PermissionDenied(format!(
                    "{path}: leaves the sandbox root"
                )));
            }
        }
        let rel = if rest.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            rest
        };
        Ok(Resolved { root, rel })
    }
}

fn cstr(p: &Path) -> Result<CString, AgentError> {
    use std::os::unix::ffi::OsStrExt;
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| AgentError::Invalid("path contains NUL".into()))
}

/// open(2) of `root`, a trusted directory.
pub fn open_root(root: &Path) -> Result<OwnedFd, AgentError> {
    let c = cstr(root)?;
    // SAFETY: plain syscall with a valid C string.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(AgentError::io(
            format!("open {}", root.display()),
            std::io::Error::last_os_error(),
        ));
    }
    // SAFETY: fd was just returned by open and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

const RESOLVE_NO_XDEV: u64 = 0x01;
const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
const RESOLVE_BENEATH: u64 = 0x08;

/// openat2(dirfd, rel, flags, mode) confined beneath `dirfd`.
pub fn open_beneath(
    dirfd: &OwnedFd,
    rel: &Path,
    flags: i32,
    mode: u32,
) -> std::io::Result<OwnedFd> {
    let c = CString::new(std::os::unix::ffi::OsStrExt::as_bytes(rel.as_os_str()))
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    let how = OpenHow {
        flags: (flags | libc::O_CLOEXEC) as u64,
        mode: if flags & libc::O_CREAT != 0 {
            mode as u64
        } else {
            0
        },
        // NO_XDEV: a path stays on its root's own mount (each root is one), so it can never
        // reach another file system through a mount point beneath a root.
        resolve: RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV,
    };
    // SAFETY: openat2 with a valid fd, C string and open_how of the size we pass.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dirfd.as_raw_fd(),
            c.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd was just returned by the kernel and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roots() -> Roots {
        Roots::new(vec![PathBuf::from("/work"), PathBuf::from("/tmp")])
    }

    #[test]
    fn relative_paths_live_under_the_work_dir() {
        let r = roots().resolve("a/b.txt").unwrap();
        assert_eq!(r.root, PathBuf::from("/work"));
        assert_eq!(r.rel, PathBuf::from("a/b.txt"));
    }

    #[test]
    fn absolute_paths_must_be_under_a_root() {
        assert_eq!(
            roots().resolve("/tmp/x").unwrap().root,
            PathBuf::from("/tmp")
        );
        assert!(matches!(
            roots().resolve("/etc/passwd"),
            Err(AgentError::PermissionDenied(_))
        ));
    }

    #[test]
    fn parent_components_cannot_escape() {
        assert!(roots().resolve("../etc/passwd").is_err());
        assert!(roots().resolve("a/../../x").is_err());
        assert!(roots().resolve("/work/../etc").is_err());
        assert!(roots().resolve("a/../b").is_ok());
        assert!(roots().resolve("").is_err());
        assert!(roots().resolve("a\0b").is_err());
    }

    #[test]
    fn symlinks_cannot_escape() {
        let dir = std::env::temp_dir().join(format!("paths-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let link = dir.join("escape");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink("/etc", &link).unwrap();
        let root = open_root(&dir).unwrap();
        let err = open_beneath(&root, Path::new("escape/passwd"), libc::O_RDONLY, 0).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EXDEV));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
