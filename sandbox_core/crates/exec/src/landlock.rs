//! Confining a program's writes to one directory with Landlock (Linux 5.13+, unprivileged).
//!
//! The judge runs each test case with the right to create, change or remove files only beneath the
//! case's own directory (its cwd and `TMPDIR`) and to write `/dev/null`. Without it a case could
//! leave files in the sandbox's shared places (`/tmp`, `/dev/shm`, the work dir) for the next cases
//! and calls to find. Reading and executing stay unrestricted, and so do the stdio pipes (already
//! open). The agent builds the ruleset; the program enforces it on itself before it runs user code
//! (`landlock_restrict_self`, after `no_new_privs`): the spawned child pre-exec, or the zygote's
//! worker, which gets the ruleset fd with its stdio.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::OnceLock;

// Syscall numbers are the same on every architecture (allocated after the unification).
const SYS_CREATE_RULESET: libc::c_long = 444;
const SYS_ADD_RULE: libc::c_long = 445;
pub(crate) const SYS_RESTRICT_SELF: libc::c_long = 446;

const CREATE_RULESET_VERSION: u32 = 1;
const RULE_PATH_BENEATH: u32 = 1;

const WRITE_FILE: u64 = 1 << 1;
const REMOVE_DIR: u64 = 1 << 4;
const REMOVE_FILE: u64 = 1 << 5;
const MAKE_CHAR: u64 = 1 << 6;
const MAKE_DIR: u64 = 1 << 7;
const MAKE_REG: u64 = 1 << 8;
const MAKE_SOCK: u64 = 1 << 9;
const MAKE_FIFO: u64 = 1 << 10;
const MAKE_BLOCK: u64 = 1 << 11;
const MAKE_SYM: u64 = 1 << 12;
/// ABI 2: linking or renaming a file into another directory.
const REFER: u64 = 1 << 13;
/// ABI 3: truncate(2), open(O_TRUNC).
const TRUNCATE: u64 = 1 << 14;

#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
}

#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// The kernel's Landlock ABI version, 0 when it has none (old kernel, or the LSM is off).
pub fn abi() -> u32 {
    static ABI: OnceLock<u32> = OnceLock::new();
    *ABI.get_or_init(|| {
        // SAFETY: plain syscall; with the VERSION flag the kernel reads no attribute.
        let v = unsafe {
            libc::syscall(
                SYS_CREATE_RULESET,
                std::ptr::null::<RulesetAttr>(),
                0usize,
                CREATE_RULESET_VERSION,
            )
        };
        u32::try_from(v).unwrap_or(0)
    })
}

/// The write rights this kernel's Landlock can take away.
fn write_rights(abi: u32) -> u64 {
    let mut r = WRITE_FILE
        | REMOVE_DIR
        | REMOVE_FILE
        | MAKE_CHAR
        | MAKE_DIR
        | MAKE_REG
        | MAKE_SOCK
        | MAKE_FIFO
        | MAKE_BLOCK
        | MAKE_SYM;
    if abi >= 2 {
        r |= REFER;
    }
    if abi >= 3 {
        r |= TRUNCATE;
    }
    r
}

/// A ruleset that allows writes only beneath `dir` (and to `/dev/null`); `None` when the kernel
/// has no Landlock, which the caller reports.
pub fn write_only_beneath(dir: &Path) -> io::Result<Option<OwnedFd>> {
    let abi = abi();
    if abi == 0 {
        return Ok(None);
    }
    let rights = write_rights(abi);
    let attr = RulesetAttr {
        handled_access_fs: rights,
    };
    // SAFETY: the attribute struct is valid for the size given; the result is a new fd we own.
    let fd = unsafe {
        libc::syscall(
            SYS_CREATE_RULESET,
            &attr as *const RulesetAttr,
            std::mem::size_of::<RulesetAttr>(),
            0u32,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh fd returned by the kernel (close-on-exec), owned from here on.
    let ruleset = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    allow(&ruleset, dir, rights)?;
    // A file rule may carry file rights only.
    allow(
        &ruleset,
        Path::new("/dev/null"),
        rights & (WRITE_FILE | TRUNCATE),
    )?;
    Ok(Some(ruleset))
}

fn allow(ruleset: &OwnedFd, path: &Path, rights: u64) -> io::Result<()> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in path"))?;
    // SAFETY: a valid C string; O_PATH opens without reading.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh fd we own.
    let parent = unsafe { OwnedFd::from_raw_fd(fd) };
    let rule = PathBeneathAttr {
        allowed_access: rights,
        parent_fd: parent.as_raw_fd(),
    };
    // SAFETY: the rule struct is valid for the call; both fds are open.
    let r = unsafe {
        libc::syscall(
            SYS_ADD_RULE,
            ruleset.as_raw_fd(),
            RULE_PATH_BENEATH,
            &rule as *const PathBeneathAttr,
            0u32,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_a_ruleset_where_the_kernel_has_landlock() {
        let dir = std::env::temp_dir();
        match write_only_beneath(&dir) {
            Ok(Some(_)) => assert!(abi() >= 1),
            Ok(None) => assert_eq!(abi(), 0),
            Err(e) => panic!("ruleset: {e}"),
        }
        assert!(write_only_beneath(Path::new("/nonexistent/dir")).is_err() || abi() == 0);
    }
}
