//! SetPermissions: permission bits, owner and group of an entry (a symlink's target, followed
//! beneath the sandbox's roots only).

use std::os::fd::{AsFd, AsRawFd};

use sandbox_proto as pb;

use super::{fd_path, io};
use crate::error::AgentError;
use crate::paths::{open_beneath, open_root, Roots};
use crate::server::accounts::Accounts;

pub fn set_permissions(
    roots: &Roots,
    accounts: &Accounts,
    op: &pb::SetPermissionsOp,
) -> Result<(), AgentError> {
    let path = op.path.as_str();
    if let Some(m) = op.mode.filter(|m| *m > 0o7777) {
        return Err(AgentError::Invalid(format!(
            "{path}: mode {m:o} is not a permission mode"
        )));
    }
    // Checked before anything changes: a bad name leaves the file as it was.
    let uid = match op.owner.as_str() {
        "" => None,
        name => Some(
            accounts
                .lookup(name)?
                .map_or(accounts.owner.uid, |u| u.owner.uid),
        ),
    };
    let gid = match op.group.as_str() {
        "" => None,
        name => Some(accounts.group(name)?),
    };
    let r = roots.resolve(path)?;
    let root = open_root(&r.root)?;
    let fd = open_beneath(&root, &r.rel, libc::O_PATH, 0).map_err(io(format!("open {path}")))?;
    if uid.is_some() || gid.is_some() {
        let empty = c"";
        // SAFETY: fchownat of an O_PATH fd with AT_EMPTY_PATH; -1 leaves an id as it is.
        let rc = unsafe {
            libc::fchownat(
                fd.as_raw_fd(),
                empty.as_ptr(),
                uid.unwrap_or(u32::MAX),
                gid.unwrap_or(u32::MAX),
                libc::AT_EMPTY_PATH,
            )
        };
        if rc != 0 {
            return Err(AgentError::io(
                format!("chown {path}"),
                std::io::Error::last_os_error(),
            ));
        }
    }
    if let Some(mode) = op.mode {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(fd_path(fd.as_fd()), std::fs::Permissions::from_mode(mode))
            .map_err(io(format!("chmod {path}")))?;
    }
    Ok(())
}
