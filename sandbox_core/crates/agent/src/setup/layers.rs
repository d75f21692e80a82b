//! A sandbox made from a checkpoint: each writable place of its root (the root itself, `/usr` of a
//! writable root, `/tmp`, `/mnt`, the work dir) becomes an overlay whose lower layers are that
//! place's part of every checkpoint layer (`--layer`, bottom first; read-only, idmapped into the
//! programs' user namespace like an image) and whose upper layer is the place's own fresh disk. The
//! layers are shared by every sandbox made from them; a sandbox's writes stay in its upper layer.
//!
//! Every writable place is also recorded as a `Place` (its path in the sandbox and a descriptor of
//! its changes: the upper layer, or the whole tmpfs of a place with no layer beneath), which the
//! `Checkpoint` call walks: a checkpoint holds what changed, never what it was made from.

use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::rootfs::{bind_plain_ro, idmapped_bind, mkdirs, overlay};
use super::SetupError;

/// One writable place of the sandbox: where programs see it and where its changes are.
pub struct Place {
    /// Its path in the sandbox (absolute).
    pub path: PathBuf,
    /// A directory descriptor of its changes (an overlay's upper layer, or the place's own disk).
    pub changes: OwnedFd,
    /// A layered volume's (`setup::volumes`): not part of the sandbox's file system.
    pub volume: bool,
}

/// What a checkpoint walks: the sandbox's writable places and how its ids map to the programs'.
pub struct Changes {
    pub places: Vec<Place>,
    /// Host id of the programs' id 0 (0: no user namespace; ids are stored as they are).
    pub id_base: u32,
}

static CHANGES: OnceLock<Changes> = OnceLock::new();

/// Recorded once, when the root is built.
pub fn record(changes: Changes) {
    let _ = CHANGES.set(changes);
}

/// The sandbox's writable places (none without `--new-root`).
pub fn changes() -> Option<&'static Changes> {
    CHANGES.get()
}

/// A directory descriptor of `p` (read, never followed if a symlink).
pub fn open_dir(p: &Path) -> Result<OwnedFd, SetupError> {
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap_or_default();
    // SAFETY: open(2) with a valid C string; the descriptor is ours.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(SetupError::Create {
            path: p.display().to_string(),
            source: std::io::Error::last_os_error(),
        });
    }
    // SAFETY: just returned by the kernel.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Descriptors of the layers (held until the root is built) and paths that reach them through
/// those descriptors: the sandbox's disk is mounted over the build directory, which may hide where
/// the layers are.
pub fn hold(layers: &[PathBuf]) -> Result<(Vec<OwnedFd>, Vec<PathBuf>), SetupError> {
    let mut held = Vec::with_capacity(layers.len());
    let mut paths = Vec::with_capacity(layers.len());
    for l in layers {
        let fd = open_dir(l)?;
        paths.push(PathBuf::from(format!(
            "/proc/self/fd/{}",
            std::os::fd::AsRawFd::as_raw_fd(&fd)
        )));
        held.push(fd);
    }
    Ok((held, paths))
}

/// The parts of `layers` (bottom first) at `rel` that exist, top first: an overlay's lower order.
pub fn parts(layers: &[PathBuf], rel: &Path) -> Vec<PathBuf> {
    layers
        .iter()
        .rev()
        .map(|l| l.join(rel))
        .filter(|p| p.is_dir())
        .collect()
}

/// Mounts each of `lowers` read-only at `at/0`, `at/1`, ... (idmapped into `userns` when there is
/// one) and returns those mount points, in the same order.
pub fn mount_lowers(
    lowers: &[PathBuf],
    at: &Path,
    userns: Option<RawFd>,
) -> Result<Vec<PathBuf>, SetupError> {
    let mut mounted = Vec::with_capacity(lowers.len());
    for (i, lower) in lowers.iter().enumerate() {
        let target = at.join(i.to_string());
        mkdirs(&target)?;
        match userns {
            Some(ns) => idmapped_bind(lower, &target, ns, true)?,
            None => bind_plain_ro(lower, &target)?,
        }
        mounted.push(target);
    }
    Ok(mounted)
}

/// Makes `target` (a fresh tmpfs just mounted there) an overlay of `lowers` (top first) with its
/// upper layer on that tmpfs, and returns the place's changes. Without lowers the tmpfs stays as
/// it is and is its own changes.
pub fn stack_on_tmpfs(
    target: &Path,
    lowers: &[PathBuf],
    userns: Option<RawFd>,
) -> Result<OwnedFd, SetupError> {
    if lowers.is_empty() {
        return open_dir(target);
    }
    let (hidden, upper, work) = (
        target.join(".layers"),
        target.join(".upper"),
        target.join(".work"),
    );
    let mounted = mount_lowers(lowers, &hidden, userns)?;
    for d in [&upper, &work] {
        mkdirs(d)?;
    }
    // The overlay's top directory is the upper layer's: give it the tmpfs's mode and owner.
    let top = std::fs::metadata(target).map_err(|source| SetupError::Create {
        path: target.display().to_string(),
        source,
    })?;
    std::os::unix::fs::chown(&upper, Some(top.uid()), Some(top.gid()))
        .and_then(|()| {
            std::fs::set_permissions(
                &upper,
                std::os::unix::fs::PermissionsExt::from_mode(top.mode() & 0o7777),
            )
        })
        .map_err(|source| SetupError::Create {
            path: upper.display().to_string(),
            source,
        })?;
    let changes = open_dir(&upper)?;
    overlay(&mounted, &upper, &work, target)?;
    Ok(changes)
}
