//! MakeDir: a directory and its missing parents (`mkdir -p`), owned by the user it is made for.

use std::os::fd::{AsFd, AsRawFd};

use sandbox_proto as pb;

use super::{c_name, chown_fd, fd_path, io, make_parents, open_parent, split, Owner};
use crate::error::AgentError;
use crate::paths::{open_beneath, open_root, Roots};

pub fn make_dir(roots: &Roots, owner: Owner, op: &pb::MakeDirOp) -> Result<(), AgentError> {
    let path = op.path.as_str();
    let mode = match op.mode {
        0 => 0o755,
        m if m > 0o7777 => {
            return Err(AgentError::Invalid(format!(
                "{path}: mode {m:o} is not a permission mode"
            )))
        }
        m => m,
    };
    let r = roots.resolve(path)?;
    let root = open_root(&r.root)?;
    make_parents(&root, &r.rel, owner).map_err(io(format!("create parent dirs of {path}")))?;
    let dir = open_parent(&root, &r.rel, path)?;
    let name = split(&r.rel).1;
    let made = if name == "." {
        false
    } else {
        let c = c_name(name).map_err(io(format!("mkdir {path}")))?;
        // SAFETY: mkdirat on a valid dir fd and C string.
        if unsafe { libc::mkdirat(dir.as_raw_fd(), c.as_ptr(), 0o700) } == 0 {
            true
        } else {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EEXIST) {
                return Err(AgentError::io(format!("mkdir {path}"), e));
            }
            false
        }
    };
    if !made {
        // What is there already: a directory (a symlink to one counts, as for `mkdir -p`), or not.
        if open_beneath(&root, &r.rel, libc::O_PATH | libc::O_DIRECTORY, 0).is_err() {
            return Err(AgentError::Invalid(format!(
                "{path}: a file exists there, not a directory"
            )));
        }
        if !op.exist_ok {
            return Err(AgentError::Exists(format!("{path}: the directory exists")));
        }
        return Ok(());
    }
    let fd = open_beneath(
        &dir,
        std::path::Path::new(name),
        libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
        0,
    )
    .map_err(io(format!("open {path}")))?;
    chown_fd(fd.as_fd(), owner).map_err(io(format!("chown {path}")))?;
    // The mode exactly, whatever the agent's umask (`mkdir -m`).
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(fd_path(fd.as_fd()), std::fs::Permissions::from_mode(mode))
        .map_err(io(format!("chmod {path}")))?;
    Ok(())
}
