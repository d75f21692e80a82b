"""Volumes: named, persistent, bounded directories that sandboxes mount at a path of their choosing.

A volume is a file system of its own: an ext4 image of `size_bytes` with `inodes` inodes, so a
program that fills it gets ENOSPC from its own kernel (bytes or inodes) and nothing else is
touched. While a sandbox of this process mounts it (and `LINGER_S` after the last), the image is
mounted once on the host (`<root>/mnt/<id>`, loop device, no set-id bits or devices) and bound
into each sandbox (`Template.volumes`), idmapped so its files keep the ids the programs see: it
reads the same in every sandbox, whatever its host ids. Its root directory is world-writable
with the sticky bit, as `/tmp` is, so every user of every sandbox can make files in it.

On disk (`root`, `$SANDBOXES_VOLUME_DIR`, else `volumes` beside the image cache): `<id>.img` the
image, `<id>.json` the record (written to a temporary file and renamed), `mnt/<id>` the mount
point while mounted. Volumes survive the sandboxes and the process. Each belongs to an owner (an
API key's id; "" for an embedded pool) and is named uniquely among its owner's; another owner's is
missing to a caller. Deleting a mounted volume is deferred: it is gone for its owner at once, its
image once the last sandbox that mounts it ends.

One process mounts an image at a time (an exclusive lock on the image while mounted): a second
server on the same directory gets a clear error for a volume the first has mounted.
"""

from __future__ import annotations

import builtins
import contextlib
import fcntl
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..backends.images import cache_root
from ..errors import InvalidRequest, NotFound, SandboxError
from .json_records import read_records, write_record

__all__ = [
    "DEFAULT_INODES",
    "DEFAULT_SIZE_BYTES",
    "VOLUME_DIR_ENV",
    "Volume",
    "VolumeStore",
    "volume_root",
]

VOLUME_DIR_ENV = "SANDBOXES_VOLUME_DIR"
DEFAULT_SIZE_BYTES = 1 << 30
MIN_SIZE_BYTES = 4 << 20
MAX_SIZE_BYTES = 1 << 40
BYTES_PER_INODE = 16384  # a volume's inodes when none are asked for: one per 16 KiB
DEFAULT_INODES = DEFAULT_SIZE_BYTES // BYTES_PER_INODE
INODE_BYTES = 256  # what each inode takes of the image (ext4's inode size)
MIN_INODES = 64
MAX_INODES = 1 << 26
# Below this size the image has no journal (ext4 needs room for one).
JOURNAL_MIN_BYTES = 64 << 20
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_COMMAND_TIMEOUT_S = 120.0
# A volume no sandbox mounts any more stays mounted this long for the next one (a mount and an
# unmount cost a sandbox's create about 5 ms); a delete or `close` unmounts it at once.
LINGER_S = 30.0


def volume_root() -> Path:
    """Where this host keeps volumes."""
    if env := os.environ.get(VOLUME_DIR_ENV):
        return Path(env)
    return cache_root().parent / "volumes"


@dataclass(frozen=True)
class Volume:
    """A named, bounded file system of `owner`'s."""

    id: str
    name: str
    owner: str = ""
    size_bytes: int = DEFAULT_SIZE_BYTES
    inodes: int = DEFAULT_INODES
    created_at: float = 0.0
    labels: dict[str, str] = field(default_factory=dict)
    # The cluster's claim that holds it (a kubernetes pool's volume: no image on this host).
    claim: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Volume:
        return cls(**d)


class VolumeError(SandboxError):
    """A volume could not be made or mounted on this host (mkfs, mount, a lock held elsewhere)."""


def _run(argv: list[str], what: str) -> None:
    try:
        r = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=_COMMAND_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise VolumeError(f"{what}: {e}") from e
    if r.returncode != 0:
        raise VolumeError(f"{what}: {(r.stderr or r.stdout).strip() or f'exit {r.returncode}'}")


class _Mount:
    """One image mounted by this process: its lock and how many sandboxes use it."""

    def __init__(self, lock_fd: int) -> None:
        self.lock_fd = lock_fd
        self.users = 0
        self.linger: threading.Timer | None = None  # the unmount of a mount no sandbox uses


# Images this process has mounted, by image path: shared by every store of the process.
_MOUNTS: dict[str, _Mount] = {}
_MOUNTS_LOCK = threading.Lock()


class VolumeStore:
    """The volumes under `root` (default `volume_root()`). Blocking: call from a thread."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = Path(root) if root is not None else volume_root()
        self._lock = threading.Lock()
        self._deleted: set[str] = set()  # deleted while mounted: removed at the last release

    # -- records -------------------------------------------------------------------------------

    def _ensure(self) -> None:
        (self.root / "mnt").mkdir(parents=True, exist_ok=True, mode=0o700)

    def _image(self, volume_id: str) -> Path:
        return self.root / f"{volume_id}.img"

    def _mount_point(self, volume_id: str) -> Path:
        return self.root / "mnt" / volume_id

    def _records(self) -> list[Volume]:
        return [
            v for v in read_records(self.root, Volume.from_json, "vol-*.json") if v.id not in self._deleted
        ]

    def list(self, owner: str | None = None) -> builtins.list[Volume]:
        """`owner`'s volumes (None: everyone's), oldest first."""
        vols = [v for v in self._records() if owner is None or v.owner == owner]
        return sorted(vols, key=lambda v: (v.created_at, v.id))

    def get(self, ref: str, owner: str | None = None) -> Volume:
        """`owner`'s volume by id or name; `NotFound` for an unknown or another owner's one."""
        if not isinstance(ref, str) or not ref:
            raise InvalidRequest("a volume is named by a non-empty id or name")
        for v in self._records():
            if (v.id == ref or v.name == ref) and (owner is None or v.owner == owner):
                return v
        raise NotFound(f"no volume {ref!r}")

    def usage(self, owner: str) -> tuple[int, int]:
        """How many volumes `owner` has and their bytes (their sizes: the bound each can fill)."""
        vols = self.list(owner)
        return len(vols), sum(v.size_bytes for v in vols)

    # -- create and delete -----------------------------------------------------------------------

    def create(
        self,
        name: str,
        *,
        owner: str = "",
        size_bytes: int = DEFAULT_SIZE_BYTES,
        inodes: int | None = None,
        labels: dict[str, str] | None = None,
        claim: str | None = None,
    ) -> Volume:
        """A new empty volume of `owner`'s with room for `inodes` files and directories (None:
        one per 16 KiB); `InvalidRequest` for a bad bound or a name taken. With `claim` (a name
        prefix) it is the record of a cluster's claim of that name and its id, with no image here
        (the caller makes the claim)."""
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise InvalidRequest(f"volume name {name!r} must match {_NAME_RE.pattern}")
        _check_int("size_bytes", size_bytes, MIN_SIZE_BYTES, MAX_SIZE_BYTES)
        if inodes is None:
            inodes = max(MIN_INODES, size_bytes // BYTES_PER_INODE)
        # The inode table must leave most of the image to data.
        _check_int("inodes", inodes, MIN_INODES, min(MAX_INODES, size_bytes // (4 * INODE_BYTES)))
        if claim is None and (shutil.which("mkfs.ext4") is None or os.geteuid() != 0):
            raise VolumeError("volumes need root and mkfs.ext4 (e2fsprogs) on this host")
        with self._lock:
            if any(v.name == name for v in self.list(owner)):
                raise InvalidRequest(f"a volume named {name!r} exists already")
            self._ensure()
            vid = f"vol-{uuid.uuid4().hex[:16]}"
            vol = Volume(
                id=vid,
                name=name,
                owner=owner,
                size_bytes=size_bytes,
                inodes=inodes,
                created_at=time.time(),
                labels=dict(labels or {}),
                claim=None if claim is None else f"{claim}{vid}",
            )
            image = self._image(vol.id)
            try:
                if claim is None:
                    self._format(image, vol)
                self._write(vol)
            except BaseException:
                image.unlink(missing_ok=True)
                raise
        return vol

    def _format(self, image: Path, vol: Volume) -> None:
        with open(image, "xb") as f:
            f.truncate(vol.size_bytes)  # sparse: the host's disk fills as the volume does
        features = [] if vol.size_bytes >= JOURNAL_MIN_BYTES else ["-O", "^has_journal"]
        _run(
            [
                "mkfs.ext4",
                "-q",
                "-F",
                "-m",
                "0",
                "-N",
                str(vol.inodes),
                *features,
                "-E",
                "root_owner=0:0",
                str(image),
            ],
            f"formatting volume {vol.name!r}",
        )
        # Its root is world-writable and sticky: every user of every sandbox can make files.
        mnt = Path(tempfile.mkdtemp(prefix=".fmt-", dir=self.root))
        try:
            _run(
                ["mount", "-t", "ext4", "-o", "loop,nosuid,nodev", str(image), str(mnt)],
                "mounting a new volume",
            )
            try:
                os.chmod(mnt, 0o1777)
                shutil.rmtree(mnt / "lost+found", ignore_errors=True)
            finally:
                _run(["umount", str(mnt)], "unmounting a new volume")
        finally:
            mnt.rmdir()

    def _write(self, vol: Volume) -> None:
        write_record(self.root, vol.id, vol.to_json())

    def delete(self, ref: str, owner: str | None = None) -> Volume:
        """Deletes `owner`'s volume: at once for its owner; its image once no sandbox of this
        process mounts it."""
        with self._lock:
            vol = self.get(ref, owner)
            (self.root / f"{vol.id}.json").unlink(missing_ok=True)
            with _MOUNTS_LOCK:
                m = _MOUNTS.get(str(self._image(vol.id)))
                in_use = m is not None and m.users > 0
            self._deleted.add(vol.id)
            if not in_use:
                self._unmount(vol.id)  # one lingering: unmounted now
        if not in_use:
            self._deleted.discard(vol.id)
            self._image(vol.id).unlink(missing_ok=True)
        return vol

    # -- mounts ----------------------------------------------------------------------------------

    def acquire(self, volume_id: str) -> str:
        """The host directory of volume `volume_id`, mounted for one more sandbox."""
        image = self._image(volume_id)
        if not image.is_file() and any(v.id == volume_id and v.claim for v in self._records()):
            raise InvalidRequest(
                f"volume {volume_id} is in the cluster's storage, not on this host: reach its files "
                "from a sandbox that mounts it"
            )
        mnt = self._mount_point(volume_id)
        with _MOUNTS_LOCK:
            m = _MOUNTS.get(str(image))
            if m is None:
                if volume_id in self._deleted or not image.is_file():
                    raise NotFound(f"no volume {volume_id!r}")
                self._ensure()
                m = _Mount(self._lock_image(image))
                try:
                    mnt.mkdir(exist_ok=True, mode=0o700)
                    if os.path.ismount(mnt):  # left by a process that died with it mounted
                        _run(["umount", "-l", str(mnt)], "unmounting a stale mount")
                    _run(
                        ["mount", "-t", "ext4", "-o", "loop,nosuid,nodev", str(image), str(mnt)],
                        f"mounting volume {volume_id}",
                    )
                except BaseException:
                    os.close(m.lock_fd)
                    raise
                _MOUNTS[str(image)] = m
            if m.linger is not None:
                m.linger.cancel()
                m.linger = None
            m.users += 1
        return str(mnt)

    def release(self, volume_id: str) -> None:
        """One sandbox less mounts `volume_id`; `LINGER_S` after the last one it is unmounted (a
        deleted volume's at once, and its image removed)."""
        image = self._image(volume_id)
        with _MOUNTS_LOCK:
            m = _MOUNTS.get(str(image))
            if m is None:
                return
            m.users -= 1
            if m.users > 0:
                return
            if volume_id not in self._deleted and LINGER_S > 0:
                m.linger = threading.Timer(LINGER_S, self._linger_ended, (volume_id, m))
                m.linger.daemon = True
                m.linger.start()
                return
        self._unmount(volume_id)

    def _linger_ended(self, volume_id: str, m: _Mount) -> None:
        with _MOUNTS_LOCK:
            if _MOUNTS.get(str(self._image(volume_id))) is not m or m.users > 0 or m.linger is None:
                return
            m.linger = None
        self._unmount(volume_id)

    def close(self) -> None:
        """Unmounts this store's volumes that no sandbox uses (those lingering)."""
        with _MOUNTS_LOCK:
            idle = [
                Path(path).stem
                for path, m in _MOUNTS.items()
                if m.users == 0 and Path(path).parent == self.root
            ]
        for volume_id in idle:
            self._unmount(volume_id)

    def _unmount(self, volume_id: str) -> None:
        """Unmounts `volume_id` if no sandbox uses it (and removes a deleted volume's image)."""
        image = self._image(volume_id)
        with _MOUNTS_LOCK:
            m = _MOUNTS.get(str(image))
            if m is None or m.users > 0:
                return
            if m.linger is not None:
                m.linger.cancel()
                m.linger = None
            del _MOUNTS[str(image)]
            mnt = self._mount_point(volume_id)
            try:
                _run(["umount", str(mnt)], f"unmounting volume {volume_id}")
            except VolumeError:
                # Still busy (a sandbox's mount namespace going away): detach it now, the kernel
                # finishes once the last user is gone.
                with contextlib.suppress(VolumeError):
                    _run(["umount", "-l", str(mnt)], f"unmounting volume {volume_id}")
            with contextlib.suppress(OSError):
                mnt.rmdir()
            os.close(m.lock_fd)
        if volume_id in self._deleted:
            self._deleted.discard(volume_id)
            image.unlink(missing_ok=True)

    @staticmethod
    def _lock_image(image: Path) -> int:
        fd = os.open(image, os.O_RDONLY | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise VolumeError(f"volume {image.stem} is mounted by another process on this host") from None
        return fd


def _check_int(name: str, value: Any, lo: int, hi: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise InvalidRequest(f"{name} must be an int in [{lo}, {hi}], got {value!r}")
