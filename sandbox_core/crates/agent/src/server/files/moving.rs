//! Move: rename(2) beneath the sandbox's roots; between two file systems (the work dir and /tmp,
//! a volume), a copy of the tree that is then removed, as `mv` does.

use std::ffi::OsStr;
use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use sandbox_proto as pb;

use super::{c_name, chown_fd, fd_path, io, make_parents, open_parent, regular, split, Owner};
use crate::error::AgentError;
use crate::paths::{open_beneath, open_root, Roots};

/// Where a move ends: the absolute path of what was moved, for describing it.
pub fn move_entry(roots: &Roots, owner: Owner, op: &pb::MoveOp) -> Result<String, AgentError> {
    let (from, to) = (op.source.as_str(), op.destination.as_str());
    let s = roots.resolve(from)?;
    let d = roots.resolve(to)?;
    if s.rel == Path::new(".") {
        return Err(AgentError::Invalid(format!(
            "{from}: refusing to move a sandbox root"
        )));
    }
    let s_root = open_root(&s.root)?;
    let d_root = open_root(&d.root)?;
    let s_dir = open_parent(&s_root, &s.rel, from)?;
    let s_name = split(&s.rel).1;
    std::fs::symlink_metadata(fd_path(s_dir.as_fd()).join(s_name))
        .map_err(io(format!("stat {from}")))?;
    if op.make_parents {
        make_parents(&d_root, &d.rel, owner).map_err(io(format!("create parent dirs of {to}")))?;
    }
    // `mv a dir`: into dir, under a's name.
    let mut d_rel = d.rel.clone();
    if op.into_directory
        && open_beneath(&d_root, &d.rel, libc::O_PATH | libc::O_DIRECTORY, 0).is_ok()
    {
        d_rel.push(s_name);
    }
    if d_rel == Path::new(".") {
        return Err(AgentError::Invalid(format!(
            "{to}: a sandbox root cannot be replaced"
        )));
    }
    let d_dir = open_parent(&d_root, &d_rel, to)?;
    let d_name = split(&d_rel).1;
    let (sn, dn) = (
        c_name(s_name).map_err(io(format!("move {from}")))?,
        c_name(d_name).map_err(io(format!("move {to}")))?,
    );
    // SAFETY: renameat on valid dir fds and C strings.
    let rc = unsafe {
        libc::renameat(
            s_dir.as_raw_fd(),
            sn.as_ptr(),
            d_dir.as_raw_fd(),
            dn.as_ptr(),
        )
    };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EXDEV) {
            return Err(AgentError::io(format!("move {from} to {to}"), e));
        }
        copy(&s_dir, s_name, &d_dir, d_name).map_err(io(format!("copy {from} to {to}")))?;
        let target = fd_path(s_dir.as_fd()).join(s_name);
        let meta = std::fs::symlink_metadata(&target).map_err(io(format!("stat {from}")))?;
        if meta.is_dir() {
            std::fs::remove_dir_all(&target)
        } else {
            std::fs::remove_file(&target)
        }
        .map_err(io(format!("remove {from} after copying it")))?;
    }
    Ok(super::absolute(&d.root, &d_rel))
}

/// Copies the entry `name` of `from` to `name_to` in `to` (which must not exist): directories,
/// regular files and symlinks with their modes and owners; other types are refused.
fn copy(from: &OwnedFd, name: &OsStr, to: &OwnedFd, name_to: &OsStr) -> std::io::Result<()> {
    let src = fd_path(from.as_fd()).join(name);
    let dst: PathBuf = fd_path(to.as_fd()).join(name_to);
    let meta = std::fs::symlink_metadata(&src)?;
    let ft = meta.file_type();
    if ft.is_symlink() {
        std::os::unix::fs::symlink(std::fs::read_link(&src)?, &dst)?;
        std::os::unix::fs::lchown(&dst, Some(meta.uid()), Some(meta.gid())).or_else(eperm)?;
        return Ok(());
    }
    let owner = Owner {
        uid: meta.uid(),
        gid: meta.gid(),
    };
    let mode = meta.permissions().mode() & 0o7777;
    if ft.is_dir() {
        std::fs::create_dir(&dst)?;
        let sub_from = open_beneath(
            from,
            Path::new(name),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
            0,
        )?;
        let sub_to = open_beneath(
            to,
            Path::new(name_to),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
            0,
        )?;
        let mut names: Vec<_> = std::fs::read_dir(fd_path(sub_from.as_fd()))?
            .flatten()
            .map(|e| e.file_name())
            .collect();
        names.sort();
        for n in names {
            copy(&sub_from, &n, &sub_to, &n)?;
        }
        chown_fd(sub_to.as_fd(), owner)?;
        std::fs::set_permissions(
            fd_path(sub_to.as_fd()),
            std::fs::Permissions::from_mode(mode),
        )?;
        return Ok(());
    }
    let input = open_beneath(
        from,
        Path::new(name),
        libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY,
        0,
    )?;
    let mut input = std::fs::File::from(input);
    if regular(&input, &src.to_string_lossy()).is_err() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "only directories, regular files and symlinks are moved between file systems",
        ));
    }
    let output = open_beneath(
        to,
        Path::new(name_to),
        libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW,
        0o600,
    )?;
    let mut output = std::fs::File::from(output);
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = input.read(&mut buf)?;
        if n == 0 {
            break;
        }
        std::io::Write::write_all(&mut output, &buf[..n])?;
    }
    chown_fd(output.as_fd(), owner)?;
    output.set_permissions(std::fs::Permissions::from_mode(mode))?;
    Ok(())
}

/// A chown the agent may not make (it is not root) leaves the copy the agent's.
fn eperm(e: std::io::Error) -> std::io::Result<()> {
    if e.raw_os_error() == Some(libc::EPERM) {
        Ok(())
    } else {
        Err(e)
    }
}
