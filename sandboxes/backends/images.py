"""Images of the local backend: a template's `image` made into a directory the agent builds the
sandbox's root on (a read-only lower layer: each sandbox writes only to its own upper layer).

An image is one of:
- a directory: an unpacked root file system, used where it is;
- a file: a root file system tarball, or a `docker save` archive (layers applied in order,
  whiteouts honoured), unpacked once and cached by the file's sha256;
- a name known to the local Docker engine (`sandboxes-base:bookworm`): saved from the engine
  and unpacked once, cached by the image's id.

The cache (`$SANDBOXES_IMAGE_CACHE`, else /var/cache/sandboxes/images for root, else
~/.cache/sandboxes/images) holds one directory per digest, made under a lock into a temporary
directory and renamed into place, so concurrent pools unpack an image once and a half-unpacked
one is never used. Nothing removes entries by itself: `clear_cache` (or deleting the directory)
does.
"""

from __future__ import annotations

import bz2
import contextlib
import fcntl
import gzip
import hashlib
import io
import json
import lzma
import os
import shutil
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from .._bridge import api
from ..errors import LaunchError
from ..tar_stream import entries

__all__ = ["CACHE_ENV", "cache_root", "clear_cache", "resolve"]

CACHE_ENV = "SANDBOXES_IMAGE_CACHE"
# Entries of a `docker save` archive itself (its layers are tarballs inside it, read as streams);
# read by name, so indexed in memory.
MAX_SAVED_MEMBERS = 100_000


def cache_root() -> Path:
    """Where unpacked images live on this host."""
    if env := os.environ.get(CACHE_ENV):
        return Path(env)
    if os.geteuid() == 0:
        return Path("/var/cache/sandboxes/images")
    return Path.home() / ".cache" / "sandboxes" / "images"


def clear_cache(root: Path | None = None) -> None:
    """Removes every unpacked image (sandboxes running on one keep their mount of it)."""
    shutil.rmtree(root or cache_root(), ignore_errors=True)


def resolve(image: str, root: Path | None = None) -> Path:
    """The unpacked root file system of `image` (blocking: unpacks on first use)."""
    root = root or cache_root()
    p = Path(image)
    if p.is_dir():
        if not (p / "bin").exists() and not (p / "usr").is_dir():
            raise LaunchError(
                f"image directory {p} has no /usr or /bin: not a root file system", step="image"
            )
        return p.resolve()
    if p.is_file():
        return _cached(root, "file-" + _sha256(p), lambda dest: _unpack_file(p, dest))
    return _from_engine(image, root)


def _sha256(p: Path) -> str:
    h = hashlib.sha256()
    with p.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


@contextlib.contextmanager
def _locked(root: Path, key: str) -> Iterator[None]:
    root.mkdir(mode=0o755, parents=True, exist_ok=True)
    fd = os.open(root / f".{key}.lock", os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _cached(root: Path, key: str, unpack: object) -> Path:
    dest = root / key
    if dest.is_dir():
        return dest
    with _locked(root, key):
        if dest.is_dir():
            return dest
        tmp = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=root))
        try:
            tmp.chmod(0o755)
            unpack(tmp)  # type: ignore[operator]
            os.rename(tmp, dest)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return dest


def _from_engine(name: str, root: Path) -> Path:
    try:
        import docker
        import docker.errors
    except ImportError as e:
        raise LaunchError(
            f"image {name!r} is not a path, and the docker SDK is missing to look it up", step="image"
        ) from e
    try:
        client = docker.from_env(timeout=600)
    except docker.errors.DockerException as e:
        raise LaunchError(
            f"image {name!r} is not a path, and no Docker engine answers: {e}", step="image"
        ) from e
    try:
        try:
            img = client.images.get(name)
        except docker.errors.ImageNotFound as e:
            raise LaunchError(
                f"image {name!r} is not in the local Docker engine (nothing is pulled)", step="image"
            ) from e
        key = "docker-" + img.id.removeprefix("sha256:")

        def unpack(dest: Path) -> None:
            with tempfile.TemporaryFile(dir=root) as archive:
                for chunk in img.save(named=False):
                    archive.write(chunk)
                archive.seek(0)
                with tarfile.open(fileobj=archive) as t:
                    _unpack_saved(t, dest, repr(name))

        return _cached(root, key, unpack)
    except docker.errors.DockerException as e:
        raise LaunchError(f"image {name!r}: {e}", step="image") from e
    finally:
        client.close()


def _unpack_file(p: Path, dest: Path) -> None:
    try:
        saved, members = _scan(p)
        if saved and members > MAX_SAVED_MEMBERS:
            raise LaunchError(
                f"image archive {p} has {members} entries: a docker save archive has at most {MAX_SAVED_MEMBERS}",
                step="image",
            )
        if saved:
            with tarfile.open(p) as t:  # indexed: its entries are its layers and their records
                _unpack_saved(t, dest, str(p))
        else:
            with p.open("rb") as f:
                _apply_layer(f, dest, str(p))
    except tarfile.TarError as e:
        raise LaunchError(f"image {p} is not a tar archive: {e}", step="image") from e


def _scan(p: Path) -> tuple[bool, int]:
    """Whether the tarball `p` is a `docker save` archive (it has a `manifest.json`), and its
    number of entries, read as a stream."""
    saved, n = False, 0
    with tarfile.open(p, mode="r|*") as t:
        for m in entries(t):
            n += 1
            saved = saved or m.name == "manifest.json"
    return saved, n


def _unpack_saved(t: tarfile.TarFile, dest: Path, what: str) -> None:
    """A `docker save` archive (of the image `what` names): its manifest's layers, bottom first."""
    manifest = _json(t, "manifest.json")
    if not isinstance(manifest, list) or not manifest or "Layers" not in manifest[0]:
        raise LaunchError("image archive has no usable manifest.json", step="image")
    for layer in manifest[0]["Layers"]:
        f = t.extractfile(layer)
        if f is None:
            raise LaunchError(f"image archive lacks its layer {layer}", step="image")
        with f:
            _apply_layer(f, dest, f"{what} layer {layer}")


def _json(t: tarfile.TarFile, name: str) -> object:
    f: IO[bytes] | None = t.extractfile(name)
    if f is None:
        raise LaunchError(f"image archive lacks {name}", step="image")
    with f:
        return json.load(f)


def _apply_layer(f: IO[bytes], dest: Path, what: str) -> None:
    """One layer (a tar, compressed or not: gzip, bzip2 or xz, as `tarfile`'s "r|*" reads it)
    onto `dest`, by the native `sandbox-layer` crate (`_native.apply_layer`): its whiteouts delete
    what lower layers made, the rest is extracted with owners and modes kept, and nothing lands
    outside `dest` (a symlink the layer makes may point anywhere: it is read inside the sandbox,
    whose root `dest` is; one on an entry's way is followed only inside `dest`; a hard link's
    target must be inside). `what` names the layer in errors."""
    native = api()
    with _uncompressed(f) as layer:
        try:
            native.apply_layer(layer, str(dest))
        except LaunchError as e:
            raise LaunchError(f"image {what}: {e.detail}", detail=e.detail, step="image") from e


@contextlib.contextmanager
def _uncompressed(f: IO[bytes]) -> Iterator[IO[bytes] | io.BufferedIOBase]:
    """`f` decompressed as it is read (seekable back to its start), told by its first bytes."""
    head = f.read(10)
    f.seek(0)
    if head.startswith(b"\x1f\x8b\x08"):
        with gzip.GzipFile(fileobj=f, mode="rb") as gz:
            yield gz
    elif head[:3] == b"BZh" and head[4:10] == b"1AY&SY":
        with bz2.BZ2File(f) as bz:
            yield bz
    elif head.startswith((b"\x5d\x00\x00\x80", b"\xfd7zXZ")):
        with lzma.LZMAFile(f) as xz:
            yield xz
    else:
        yield f
