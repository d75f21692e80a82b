//! Volumes: directories of the host (`--volume SRC:DST[:ro]`), each bound at `DST` in the
//! sandbox, read-write unless `:ro`, never with set-id bits or devices. Their files keep the ids
//! the programs see (idmapped into the programs' user namespace, like an image), so a volume
//! reads the same in every sandbox that mounts it whatever its host ids. A volume is not part of
//! the sandbox's file system: a checkpoint never crosses into it (`Checkpoint` stays on its
//! places' devices).
//!
//! A layered volume (`--layered-volume`) is instead a directory of the sandbox's own, made of
//! checkpoint layers: an overlay of them (bottom first; none: empty) whose upper layer is a fresh
//! tmpfs bounded like the work dir, so a sandbox's writes there are private to it, and a place
//! of its own that `Checkpoint` streams only when asked for by its path (a new version of the
//! volume), never with the sandbox's file system.

use std::os::fd::{OwnedFd, RawFd};
use std::path::{Component, Path, PathBuf};

use super::layers::{self, Place};
use super::rootfs::{bind_plain, idmapped_bind, mkdirs, remount_ro, tmpfs};
use super::SetupError;

/// One `--volume SRC:DST[:ro]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Volume {
    pub src: PathBuf,
    /// Absolute, normal components only.
    pub dst: PathBuf,
    pub read_only: bool,
}

/// Where a volume may not go: the sandbox's own machinery.
const RESERVED: [&str; 5] = ["/proc", "/dev", "/sys", "/etc", "/judge"];

impl std::str::FromStr for Volume {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (rest, read_only) = match s.strip_suffix(":ro") {
            Some(r) => (r, true),
            None => (s.strip_suffix(":rw").unwrap_or(s), false),
        };
        let (src, dst) = rest
            .split_once(':')
            .ok_or_else(|| format!("volume {s:?} is not SRC:DST[:ro]"))?;
        let (src, dst) = (PathBuf::from(src), PathBuf::from(dst));
        if !src.is_absolute() {
            return Err(format!("volume source {src:?} is not an absolute path"));
        }
        check_dst(&dst)?;
        Ok(Volume {
            src,
            dst,
            read_only,
        })
    }
}

/// Where a volume may be mounted: an absolute path below `/`, of plain names, outside the
/// sandbox's machinery.
fn check_dst(dst: &Path) -> Result<(), String> {
    let plain = dst
        .components()
        .skip(1)
        .all(|c| matches!(c, Component::Normal(_)));
    if !dst.is_absolute() || !plain || dst == Path::new("/") {
        return Err(format!(
            "volume path {dst:?} must be absolute, below /, without . or .. components"
        ));
    }
    if RESERVED.iter().any(|r| dst.starts_with(r)) {
        return Err(format!("volume path {dst:?} is inside {RESERVED:?}"));
    }
    Ok(())
}

/// One `--layered-volume MODE:DST[:LAYER...]`, MODE `rw` or `ro`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayeredVolume {
    pub dst: PathBuf,
    pub read_only: bool,
    /// Checkpoint layers of the volume's own directory (absolute), bottom first.
    pub layers: Vec<PathBuf>,
}

impl std::str::FromStr for LayeredVolume {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let mut parts = s.split(':');
        let read_only = match parts.next() {
            Some("rw") => false,
            Some("ro") => true,
            _ => return Err(format!("layered volume {s:?} is not rw|ro:DST[:LAYER...]")),
        };
        let dst = PathBuf::from(parts.next().unwrap_or_default());
        check_dst(&dst)?;
        let layers: Vec<PathBuf> = parts.map(PathBuf::from).collect();
        if let Some(l) = layers.iter().find(|l| !l.is_absolute()) {
            return Err(format!(
                "layer {l:?} of a layered volume is not an absolute path"
            ));
        }
        Ok(LayeredVolume {
            dst,
            read_only,
            layers,
        })
    }
}

/// Descriptors of the volumes' sources (held until they are mounted) and the volumes with paths
/// that reach them through those: the sandbox's disk may hide where they are.
pub fn hold(volumes: &[Volume]) -> Result<(Vec<OwnedFd>, Vec<Volume>), SetupError> {
    let srcs: Vec<PathBuf> = volumes.iter().map(|v| v.src.clone()).collect();
    let (held, paths) = super::layers::hold(&srcs)?;
    let reached = volumes
        .iter()
        .zip(paths)
        .map(|(v, src)| Volume { src, ..v.clone() })
        .collect();
    Ok((held, reached))
}

/// The layered volumes' layers, held like `hold`'s sources.
pub fn hold_layered(
    volumes: &[LayeredVolume],
) -> Result<(Vec<OwnedFd>, Vec<LayeredVolume>), SetupError> {
    let mut held = Vec::new();
    let mut reached = Vec::with_capacity(volumes.len());
    for v in volumes {
        let (fds, layers) = layers::hold(&v.layers)?;
        held.extend(fds);
        reached.push(LayeredVolume {
            layers,
            ..v.clone()
        });
    }
    Ok((held, reached))
}

/// `dst` under `root`, its directories made as needed; one that is a symlink (a layer's) is
/// refused rather than followed out of `root`.
fn target_in(root: &Path, dst: &Path) -> Result<PathBuf, SetupError> {
    let mut target = root.to_path_buf();
    for part in dst.components().skip(1) {
        target.push(part);
        if let Ok(m) = std::fs::symlink_metadata(&target) {
            if m.file_type().is_symlink() {
                return Err(SetupError::Create {
                    path: dst.display().to_string(),
                    source: std::io::Error::other("a volume's path crosses a symlink"),
                });
            }
        }
    }
    mkdirs(&target)?;
    Ok(target)
}

/// Mounts every layered volume under `root` (before the pivot): a tmpfs of `size` bytes owned by
/// `owner` (host ids), stacked on the volume's layers. Returns their places; a volume at one of
/// `taken` (the sandbox's own places) is refused.
pub fn mount_layered(
    root: &Path,
    volumes: &[LayeredVolume],
    size: u64,
    owner: (u32, u32),
    taken: &[Place],
    userns: Option<RawFd>,
) -> Result<Vec<Place>, SetupError> {
    let mut places = Vec::with_capacity(volumes.len());
    for v in volumes {
        if taken.iter().chain(&places).any(|p| p.path == v.dst) {
            return Err(SetupError::Create {
                path: v.dst.display().to_string(),
                source: std::io::Error::other("a layered volume's path is a place of the sandbox"),
            });
        }
        let target = target_in(root, &v.dst)?;
        tmpfs(
            &target,
            size,
            "755",
            &format!(",uid={},gid={}", owner.0, owner.1),
        )?;
        let changes =
            layers::stack_on_tmpfs(&target, &layers::parts(&v.layers, Path::new("")), userns)?;
        if v.read_only {
            remount_ro(&target)?;
        }
        places.push(Place {
            path: v.dst.clone(),
            changes,
            volume: true,
        });
    }
    Ok(places)
}

/// Mounts every volume under `root` (before the pivot).
pub fn mount_all(root: &Path, volumes: &[Volume], userns: Option<RawFd>) -> Result<(), SetupError> {
    for v in volumes {
        let target = target_in(root, &v.dst)?;
        match userns {
            Some(ns) => idmapped_bind(&v.src, &target, ns, v.read_only)?,
            None => bind_plain(&v.src, &target, v.read_only)?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_refuses() {
        let v: Volume = "/v/1:/data:ro".parse().unwrap();
        assert_eq!(
            v,
            Volume {
                src: "/v/1".into(),
                dst: "/data".into(),
                read_only: true
            }
        );
        assert!(!"/v/1:/work/cache".parse::<Volume>().unwrap().read_only);
        for bad in [
            "/v:/",
            "/v:data",
            "/v:/a/../etc",
            "/v:/proc/x",
            "/v:/etc",
            "v:/data",
            "/v",
        ] {
            assert!(bad.parse::<Volume>().is_err(), "{bad}");
        }
    }

    #[test]
    fn parses_layered_and_refuses() {
        let v: LayeredVolume = "ro:/data:/l/1:/l/2".parse().unwrap();
        assert_eq!(
            v,
            LayeredVolume {
                dst: "/data".into(),
                read_only: true,
                layers: vec!["/l/1".into(), "/l/2".into()],
            }
        );
        let empty: LayeredVolume = "rw:/cache".parse().unwrap();
        assert!(!empty.read_only && empty.layers.is_empty());
        for bad in [
            "/data",
            "rx:/data",
            "rw:data",
            "rw:/proc/x",
            "rw:/data:l/1",
            "rw:/",
        ] {
            assert!(bad.parse::<LayeredVolume>().is_err(), "{bad}");
        }
    }
}
