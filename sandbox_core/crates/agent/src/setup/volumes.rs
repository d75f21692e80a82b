//! Volumes: directories of the host (`--volume SRC:DST[:ro]`), each bound at `DST` in the
//! sandbox, read-write unless `:ro`, never with set-id bits or devices. Their files keep the ids
//! the programs see (idmapped into the programs' user namespace, like an image), so a volume
//! reads the same in every sandbox that mounts it whatever its host ids. A volume is not part of
//! the sandbox's file system: a checkpoint never crosses into it (`Checkpoint` stays on its
//! places' devices).

use std::os::fd::{OwnedFd, RawFd};
use std::path::{Component, Path, PathBuf};

use super::rootfs::{bind_plain, idmapped_bind, mkdirs};
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
        Ok(Volume {
            src,
            dst,
            read_only,
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

/// Mounts every volume under `root` (before the pivot). The directories on the way are made as
/// needed; one that is a symlink (a layer's) is refused rather than followed out of `root`.
pub fn mount_all(root: &Path, volumes: &[Volume], userns: Option<RawFd>) -> Result<(), SetupError> {
    for v in volumes {
        let mut target = root.to_path_buf();
        for part in v.dst.components().skip(1) {
            target.push(part);
            if let Ok(m) = std::fs::symlink_metadata(&target) {
                if m.file_type().is_symlink() {
                    return Err(SetupError::Create {
                        path: v.dst.display().to_string(),
                        source: std::io::Error::other("a volume's path crosses a symlink"),
                    });
                }
            }
        }
        mkdirs(&target)?;
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
}
