"""A checkpoint's layer (a directory in an overlay's lower-layer form, `sandboxes.state.checkpoints`) as
an OCI image layer: a gzipped tar in which overlay whiteouts (0/0 character devices) are
`.wh.<name>` entries and opaque directories (`trusted.overlay.opaque`) hold a `.wh..wh..opq`,
as a registry and a container runtime expect them (the OCI image spec's "whiteouts").

Only what a layer can hold is written: directories, regular files, symlinks and whiteouts, with
the ids and modes the programs gave them (set-id bits are already gone from a layer), entries in
a fixed order and with the layer's own modification times, so that one layer is one tar.

`relocate` moves the contents of some directories elsewhere in the tar (the directory itself
stays, empty): the kubernetes backend's places that the agent mounts a disk of its own at
(`backends/kubernetes/layered.py`). `under` puts the whole layer below a directory: a layered
volume's layers there.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import stat
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

__all__ = ["LayerBlob", "write_layer"]

OPAQUE_XATTR = "trusted.overlay.opaque"
WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"


@dataclass(frozen=True)
class LayerBlob:
    """A layer written as a blob: where, its digest (of the gzipped bytes, what a registry names
    it by), its `diff_id` (of the tar, what an image's config lists) and its size."""

    path: Path
    digest: str
    diff_id: str
    size: int


class _Hashing(io.RawIOBase):
    """A file that hashes what is written through it."""

    def __init__(self, f: IO[bytes] | gzip.GzipFile) -> None:
        self.f = f
        self.sha = hashlib.sha256()
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        data = bytes(b)
        self.sha.update(data)
        self.size += len(data)
        self.f.write(data)
        return len(data)


def write_layer(
    layer: Path, dest: Path, relocate: Mapping[str, str] | None = None, under: str = ""
) -> LayerBlob:
    """Writes `layer` as a gzipped OCI layer tar at `dest` (blocking); the contents of each
    directory `relocate` names (a path relative to the layer's top) go under its target; with
    `under` (a relative path), the whole layer goes below it, its top as that directory."""
    with dest.open("wb") as raw:
        outer = _Hashing(raw)
        with gzip.GzipFile(fileobj=outer, mode="wb", compresslevel=1, mtime=0) as gz:
            inner = _Hashing(gz)
            with tarfile.open(fileobj=inner, mode="w|", format=tarfile.PAX_FORMAT) as tar:
                made: set[str] = set()
                if under:
                    st = layer.stat()
                    _add_parents(tar, under, st, made)
                    top = tarfile.TarInfo(under)
                    top.type, top.mode, top.mtime = (
                        tarfile.DIRTYPE,
                        stat.S_IMODE(st.st_mode),
                        int(st.st_mtime),
                    )
                    top.uid, top.gid = st.st_uid, st.st_gid
                    tar.addfile(top)
                _add_tree(tar, layer, "", under, dict(relocate or {}), made)
    return LayerBlob(dest, f"sha256:{outer.sha.hexdigest()}", f"sha256:{inner.sha.hexdigest()}", outer.size)


def _add_tree(
    tar: tarfile.TarFile, root: Path, rel: str, out: str, relocate: dict[str, str], made: set[str]
) -> None:
    """Adds the entries of `rel` (of the layer at `root`) as those of `out` in the tar."""
    here = root / rel if rel else root
    with os.scandir(here) as it:
        entries = sorted(it, key=lambda e: e.name)
    for e in entries:
        src = f"{rel}/{e.name}" if rel else e.name
        name = f"{out}/{e.name}" if out else e.name
        st = e.stat(follow_symlinks=False)
        if stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:
            _add_marker(tar, f"{out}/{WHITEOUT}{e.name}" if out else f"{WHITEOUT}{e.name}", st)
            continue
        info = tarfile.TarInfo(name)
        info.uid, info.gid, info.mtime = st.st_uid, st.st_gid, int(st.st_mtime)
        info.mode = stat.S_IMODE(st.st_mode) & ~(stat.S_ISUID | stat.S_ISGID)
        if stat.S_ISDIR(st.st_mode):
            info.type = tarfile.DIRTYPE
            tar.addfile(info)
            if src in relocate:
                target = relocate[src]
                _add_parents(tar, target, st, made)
                moved = tarfile.TarInfo(target)
                moved.type, moved.mode, moved.mtime = tarfile.DIRTYPE, info.mode, info.mtime
                moved.uid, moved.gid = info.uid, info.gid
                tar.addfile(moved)
                name = target
            if _opaque(Path(e.path)):
                _add_marker(tar, f"{name}/{OPAQUE}", st)
            _add_tree(tar, root, src, name, relocate, made)
        elif stat.S_ISLNK(st.st_mode):
            info.type, info.linkname = tarfile.SYMTYPE, os.readlink(e.path)
            tar.addfile(info)
        elif stat.S_ISREG(st.st_mode):
            info.size = st.st_size
            with open(e.path, "rb") as f:
                tar.addfile(info, f)
        # Anything else is not of a layer (the agent's stream never makes one): left out.


def _add_parents(tar: tarfile.TarFile, path: str, st: os.stat_result, made: set[str]) -> None:
    """Directory entries for the ancestors of `path` not added yet (root-owned, 0755)."""
    parts = path.split("/")[:-1]
    for i in range(1, len(parts) + 1):
        d = "/".join(parts[:i])
        if d not in made:
            made.add(d)
            info = tarfile.TarInfo(d)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, int(st.st_mtime)
            tar.addfile(info)


def _add_marker(tar: tarfile.TarFile, name: str, st: os.stat_result) -> None:
    info = tarfile.TarInfo(name)
    info.mtime = int(st.st_mtime)
    info.mode = 0o644
    tar.addfile(info)


def _opaque(d: Path) -> bool:
    try:
        return os.getxattr(d, OPAQUE_XATTR, follow_symlinks=False) == b"y"
    except OSError:
        return False
