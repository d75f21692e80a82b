"""Layers in an overlay's lower-layer form (`sandboxes.state.checkpoints`) merged into one, as overlayfs
shows them stacked: what a long chain of a volume's versions is folded into, so that a volume
published many times stays one layer deep (an overlay takes a bounded number of lower layers).

The result is a bottom layer: nothing lies beneath it, so whiteouts delete what the layers below
them made and are then dropped, and an opaque directory replaces what was there. Regular files
are hard links to the layers' own (layers are immutable and on one file system: no byte is
copied, and a file outlives the layer it came from); directories and symlinks are made anew
with the topmost layer's modes and owners.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Sequence
from pathlib import Path

from .layer_tar import OPAQUE_XATTR

__all__ = ["squash"]


def squash(layers: Sequence[Path], dest: Path) -> None:
    """Merges `layers` (bottom first) into `dest`, an empty directory (blocking)."""
    for layer in layers:
        _apply(Path(layer), Path(dest))


def _apply(src: Path, dst: Path) -> None:
    with os.scandir(src) as it:
        entries = sorted(it, key=lambda e: e.name)
    for e in entries:
        target = dst / e.name
        st = e.stat(follow_symlinks=False)
        if stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:  # a whiteout
            _remove(target)
        elif stat.S_ISDIR(st.st_mode):
            if _opaque(Path(e.path)) or not (target.is_dir() and not target.is_symlink()):
                _remove(target)
                target.mkdir()
            _apply(Path(e.path), target)
            _own_like(Path(e.path), target)
        elif stat.S_ISLNK(st.st_mode):
            _remove(target)
            os.symlink(os.readlink(e.path), target)
            os.lchown(target, st.st_uid, st.st_gid)
        elif stat.S_ISREG(st.st_mode):
            _remove(target)
            os.link(e.path, target, follow_symlinks=False)
        # Anything else is not of a layer: left out.


def _own_like(src: Path, dst: Path) -> None:
    st = src.stat(follow_symlinks=False)
    os.chown(dst, st.st_uid, st.st_gid, follow_symlinks=False)
    os.chmod(dst, stat.S_IMODE(st.st_mode))


def _remove(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p)
    elif os.path.lexists(p):
        p.unlink()


def _opaque(d: Path) -> bool:
    try:
        return os.getxattr(d, OPAQUE_XATTR, follow_symlinks=False) == b"y"
    except OSError:
        return False
