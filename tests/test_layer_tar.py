"""A checkpoint's layer written as an OCI layer tar (`sandboxes.state.layer_tar`): overlay whiteouts
become `.wh.` entries, an opaque directory gets its `.wh..wh..opq`, relocated directories move
with their whiteouts, set-id bits go, nothing but directories, files and symlinks is written,
and the same layer is the same bytes."""

from __future__ import annotations

import gzip
import hashlib
import os
import stat
import tarfile
from pathlib import Path

import pytest

from sandboxes.state.layer_tar import write_layer

pytestmark = pytest.mark.requires("root", reason="whiteouts and trusted xattrs need root")

# The overlay attribute of an opaque directory.
OPAQUE_XATTR = "trusted.overlay.opaque"


def make_layer(root: Path) -> None:
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "conf").write_text("c\n")
    os.mknod(root / "etc" / "gone", stat.S_IFCHR | 0o000, 0)  # a whiteout
    (root / "opt" / "fresh").mkdir(parents=True)
    os.setxattr(root / "opt" / "fresh", OPAQUE_XATTR, b"y")
    (root / "opt" / "fresh" / "f").write_text("f\n")
    (root / "work").mkdir()
    (root / "work" / "a").write_text("a\n")
    os.mknod(root / "work" / "old", stat.S_IFCHR | 0o000, 0)
    (root / "work" / "link").symlink_to("/etc/conf")
    (root / "bin").mkdir()
    (root / "bin" / "tool").write_text("t\n")
    os.chmod(root / "bin" / "tool", 0o4755)
    os.mkfifo(root / "fifo")


def test_a_layer_as_an_oci_tar(tmp_path: Path) -> None:
    layer = tmp_path / "layer"
    make_layer(layer)
    blob = write_layer(layer, tmp_path / "l.tar.gz", {"work": ".places/work"})
    raw = (tmp_path / "l.tar.gz").read_bytes()
    assert blob.digest == "sha256:" + hashlib.sha256(raw).hexdigest()
    assert blob.diff_id == "sha256:" + hashlib.sha256(gzip.decompress(raw)).hexdigest()
    assert blob.size == len(raw)
    with tarfile.open(tmp_path / "l.tar.gz") as t:
        members = {m.name: m for m in t.getmembers()}
    assert set(members) == {
        "bin",
        "bin/tool",
        "etc",
        "etc/conf",
        "etc/.wh.gone",
        "opt",
        "opt/fresh",
        "opt/fresh/.wh..wh..opq",
        "opt/fresh/f",
        "work",  # the place stays, empty: its contents moved
        ".places",
        ".places/work",
        ".places/work/a",
        ".places/work/.wh.old",
        ".places/work/link",
    }
    assert members["bin/tool"].mode == 0o755  # no set-id bit
    assert members[".places/work/link"].issym() and members[".places/work/link"].linkname == "/etc/conf"
    assert all(m.isdir() or m.isfile() or m.issym() for m in members.values())
    # The same layer is the same tar.
    again = write_layer(layer, tmp_path / "again.tar.gz", {"work": ".places/work"})
    assert (again.digest, again.diff_id) == (blob.digest, blob.diff_id)


def test_a_layer_below_a_directory(tmp_path: Path) -> None:
    """`under`: a layered volume's layer, whole below the directory its image holds it in."""
    layer = tmp_path / "layer"
    make_layer(layer)
    os.chmod(layer, 0o750)
    write_layer(layer, tmp_path / "v.tar.gz", under=".volumes/0")
    with tarfile.open(tmp_path / "v.tar.gz") as t:
        members = {m.name: m for m in t.getmembers()}
    assert {".volumes", ".volumes/0", ".volumes/0/etc/.wh.gone", ".volumes/0/work/a"} <= set(members)
    assert all(n == ".volumes" or n.startswith(".volumes/0") for n in members)
    assert members[".volumes/0"].isdir() and members[".volumes/0"].mode == 0o750
