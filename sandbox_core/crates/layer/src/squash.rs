//! Layers merged into one, as an overlay shows them stacked: what a long chain of a volume's
//! versions is folded into, so that a volume published many times stays one layer deep (an
//! overlay takes a bounded number of lower layers).
//!
//! The result is a bottom layer: nothing lies beneath it, so whiteouts delete what the layers
//! below them made and are then dropped, and an opaque directory replaces what was there. Regular
//! files are hard links to the layers' own (layers are immutable and on one file system: no byte
//! is copied, and a file outlives the layer it came from); directories and symlinks are made anew
//! with the topmost layer's modes and owners.

use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use crate::safe::{clear, lchown, sorted_names};
use crate::whiteout;

/// Merges `layers` (bottom first) into `dest`, an empty directory.
pub fn squash(layers: &[impl AsRef<Path>], dest: &Path) -> io::Result<()> {
    for layer in layers {
        merge(layer.as_ref(), dest)?;
    }
    Ok(())
}

/// The directory `src` of a layer over the directory `dst` of the merge.
fn merge(src: &Path, dst: &Path) -> io::Result<()> {
    for name in sorted_names(src)? {
        let (from, to) = (src.join(&name), dst.join(&name));
        let m = std::fs::symlink_metadata(&from)?;
        let ft = m.file_type();
        if whiteout::is_whiteout(&m) {
            clear(&to)?;
        } else if ft.is_dir() {
            let merged = matches!(std::fs::symlink_metadata(&to), Ok(t) if t.is_dir());
            if whiteout::is_opaque(&from) || !merged {
                clear(&to)?;
                std::fs::create_dir(&to)?;
            }
            merge(&from, &to)?;
            lchown(&to, m.uid().into(), m.gid().into(), false)?;
            std::fs::set_permissions(&to, std::fs::Permissions::from_mode(m.mode() & 0o7777))?;
        } else if ft.is_symlink() {
            clear(&to)?;
            std::os::unix::fs::symlink(std::fs::read_link(&from)?, &to)?;
            lchown(&to, m.uid().into(), m.gid().into(), false)?;
        } else if ft.is_file() {
            clear(&to)?;
            std::fs::hard_link(&from, &to)?;
        }
        // Anything else is not of a layer: left out.
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{scratch, tree, Node};
    use std::os::unix::fs::MetadataExt;
    use std::path::PathBuf;

    #[test]
    fn whiteouts_delete_opaque_directories_replace_and_files_are_linked() {
        let d = scratch("squash");
        let (lower, upper, out) = (d.join("lower"), d.join("upper"), d.join("out"));
        for p in ["keep", "gone", "opt/old", "opt/kept-dir"] {
            std::fs::create_dir_all(lower.join(p)).unwrap();
        }
        std::fs::write(lower.join("keep/f"), b"lower").unwrap();
        std::fs::write(lower.join("keep/replaced"), b"lower").unwrap();
        std::fs::write(lower.join("gone/f"), b"lower").unwrap();
        std::fs::write(lower.join("file-then-dir"), b"lower").unwrap();
        std::os::unix::fs::symlink("keep", lower.join("link")).unwrap();
        std::fs::create_dir_all(upper.join("keep")).unwrap();
        std::fs::write(upper.join("keep/replaced"), b"upper").unwrap();
        std::fs::set_permissions(upper.join("keep"), PermissionsExt::from_mode(0o700)).unwrap();
        whiteout::make_whiteout(&upper.join("gone")).unwrap();
        std::fs::create_dir_all(upper.join("opt")).unwrap();
        whiteout::make_opaque(&upper.join("opt")).unwrap();
        std::fs::write(upper.join("opt/new"), b"upper").unwrap();
        std::fs::create_dir_all(upper.join("file-then-dir")).unwrap();
        whiteout::make_whiteout(&upper.join("link")).unwrap();
        std::fs::create_dir(&out).unwrap();
        squash(&[&lower, &upper], &out).unwrap();
        let got = tree(&out);
        let names: Vec<PathBuf> = got.keys().cloned().collect();
        let want: Vec<PathBuf> = [
            "file-then-dir",
            "keep",
            "keep/f",
            "keep/replaced",
            "opt",
            "opt/new",
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        assert_eq!(names, want);
        assert_eq!(std::fs::read(out.join("keep/replaced")).unwrap(), b"upper");
        assert!(matches!(
            got[Path::new("keep")],
            Node::Dir { mode: 0o700, .. }
        ));
        assert!(!got
            .values()
            .any(|n| matches!(n, Node::Dir { opaque: true, .. })));
        let ino = |p: &Path| std::fs::metadata(p).unwrap().ino();
        assert_eq!(ino(&out.join("keep/f")), ino(&lower.join("keep/f")));
        assert_eq!(ino(&out.join("opt/new")), ino(&upper.join("opt/new")));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
