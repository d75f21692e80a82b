"""File operations on a volume from the host (the E2B volume content API), confined to it.

Sandboxes write a volume; the host must never be led out of it by what they wrote. Every path is
resolved one component at a time from a descriptor of the volume's root, with `O_NOFOLLOW`: a
symlink anywhere on the way is refused (`InvalidRequest`), never followed, and `..` is refused
before anything is opened. The last component is acted on through its parent's descriptor
without following it (a symlink there is reported, or removed, as itself). A file is read or
written only if it is a regular file: opened without blocking and checked on the opened
descriptor, so a FIFO, socket or device a sandbox left there is refused at once (`InvalidRequest`),
never a call that waits for a writer with a thread held. Ids are the programs' ids (a volume
keeps the ids its sandboxes see), set as asked.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass

from ..errors import InvalidRequest, NotFound

__all__ = ["Entry", "VolumeFiles"]

MAX_DEPTH = 16
MAX_ENTRIES = 10000


@dataclass(frozen=True)
class Entry:
    """One file, directory or symlink of a volume (`path` absolute within it)."""

    name: str
    path: str
    type: str  # "file", "directory", "symlink" or "unknown"
    size: int
    mode: int
    uid: int
    gid: int
    atime: float
    mtime: float
    ctime: float
    target: str | None = None


def _parts(path: str) -> list[str]:
    if not isinstance(path, str) or "\0" in path:
        raise InvalidRequest("path must be a string without NUL")
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise InvalidRequest(f"path {path!r} leaves the volume")
    return parts


def _translate(e: OSError, path: str) -> Exception:
    if e.errno in (errno.ENOENT,):
        return NotFound(f"no {path!r} in the volume")
    if e.errno in (errno.ELOOP, errno.ENOTDIR):
        return InvalidRequest(f"{path!r} is not a directory of the volume (symlinks are not followed)")
    if e.errno == errno.EEXIST:
        return InvalidRequest(f"{path!r} exists already")
    if e.errno == errno.ENOTEMPTY:
        return InvalidRequest(f"{path!r} is not empty")
    if e.errno in (errno.ENXIO, errno.ENODEV, errno.EOPNOTSUPP):  # a FIFO, socket or device
        return InvalidRequest(f"{path!r} is not a regular file")
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return InvalidRequest(f"the volume is full writing {path!r}")
    return InvalidRequest(f"{path!r}: {os.strerror(e.errno or 0)}")


class VolumeFiles:
    """Confined file operations under `root` (a volume's host mount). Blocking."""

    def __init__(self, root: str) -> None:
        self.root = root

    @contextlib.contextmanager
    def _dir(self, parts: list[str], *, make: bool = False, uid: int = 0, gid: int = 0) -> Iterator[int]:
        """A descriptor of the directory `parts` (made, with `uid`/`gid`, when `make`)."""
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for i, part in enumerate(parts):
                try:
                    nxt = os.open(
                        part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd
                    )
                except FileNotFoundError:
                    if not make:
                        raise
                    os.mkdir(part, 0o755, dir_fd=fd)
                    os.chown(part, uid, gid, dir_fd=fd, follow_symlinks=False)
                    nxt = os.open(
                        part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd
                    )
                except OSError as e:
                    raise _translate(e, "/" + "/".join(parts[: i + 1])) from e
                os.close(fd)
                fd = nxt
            yield fd
        finally:
            os.close(fd)

    def _split(self, path: str) -> tuple[list[str], str]:
        parts = _parts(path)
        if not parts:
            raise InvalidRequest("the volume's root itself cannot be that")
        return parts[:-1], parts[-1]

    def _entry(self, dir_fd: int, name: str, path: str) -> Entry:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        kind = (
            "directory"
            if stat.S_ISDIR(st.st_mode)
            else "file"
            if stat.S_ISREG(st.st_mode)
            else "symlink"
            if stat.S_ISLNK(st.st_mode)
            else "unknown"
        )
        target = os.readlink(name, dir_fd=dir_fd) if kind == "symlink" else None
        return Entry(
            name=name,
            path=path,
            type=kind,
            size=st.st_size,
            mode=stat.S_IMODE(st.st_mode),
            uid=st.st_uid,
            gid=st.st_gid,
            atime=st.st_atime,
            mtime=st.st_mtime,
            ctime=st.st_ctime,
            target=target,
        )

    def stat(self, path: str) -> Entry:
        parts = _parts(path)
        if not parts:
            fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                e = self._entry(fd, ".", "/")
            finally:
                os.close(fd)
            return Entry(**{**e.__dict__, "name": ""})
        parent, name = parts[:-1], parts[-1]
        with self._dir(parent) as fd:
            try:
                return self._entry(fd, name, "/" + "/".join(parts))
            except OSError as e:
                raise _translate(e, path) from e

    def list(self, path: str, depth: int = 1) -> list[Entry]:
        """Entries under directory `path`, `depth` levels down (symlinks listed, not entered)."""
        if isinstance(depth, bool) or not isinstance(depth, int) or not 1 <= depth <= MAX_DEPTH:
            raise InvalidRequest(f"depth must be an int in [1, {MAX_DEPTH}]")
        out: list[Entry] = []

        def walk(parts: list[str], level: int) -> None:
            with self._dir(parts) as fd:
                for name in sorted(os.listdir(fd)):
                    if len(out) >= MAX_ENTRIES:
                        raise InvalidRequest(f"more than {MAX_ENTRIES} entries: list a deeper path")
                    e = self._entry(fd, name, "/" + "/".join([*parts, name]))
                    out.append(e)
                    if e.type == "directory" and level < depth:
                        walk([*parts, name], level + 1)

        walk(_parts(path), 1)
        return out

    def read(self, path: str, max_bytes: int) -> bytes:
        parent, name = self._split(path)
        with self._dir(parent) as dfd:
            try:
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dfd)
            except OSError as e:
                raise _translate(e, path) from e
            with os.fdopen(fd, "rb") as f:
                if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                    raise InvalidRequest(f"{path!r} is not a regular file")
                data = f.read(max_bytes + 1)
        if len(data) > max_bytes:
            raise InvalidRequest(f"{path!r} is larger than {max_bytes} bytes")
        return data

    def write(self, path: str, data: bytes, *, uid: int, gid: int, mode: int, parents: bool) -> Entry:
        """Creates or overwrites the file (never through a symlink); `parents` makes missing
        directories on the way."""
        parent, name = self._split(path)
        with self._dir(parent, make=parents, uid=uid, gid=gid) as dfd:
            try:
                st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            except FileNotFoundError:
                pass
            except OSError as e:
                raise _translate(e, path) from e
            else:
                if not stat.S_ISREG(st.st_mode):  # nothing of it opened, nothing truncated
                    raise InvalidRequest(f"{path!r} is not a regular file")
            try:
                fd = os.open(
                    name,
                    os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
                    mode,
                    dir_fd=dfd,
                )
            except OSError as e:
                raise _translate(e, path) from e
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):  # made a FIFO since the stat
                    raise InvalidRequest(f"{path!r} is not a regular file")
                os.ftruncate(fd, 0)
                os.fchown(fd, uid, gid)
                os.fchmod(fd, mode)
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            except OSError as e:
                raise _translate(e, path) from e
            finally:
                os.close(fd)
            return self._entry(dfd, name, "/" + "/".join([*parent, name]))

    def mkdir(self, path: str, *, uid: int, gid: int, mode: int, parents: bool) -> Entry:
        parent, name = self._split(path)
        with self._dir(parent, make=parents, uid=uid, gid=gid) as dfd:
            try:
                os.mkdir(name, mode, dir_fd=dfd)
                os.chown(name, uid, gid, dir_fd=dfd, follow_symlinks=False)
                fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
                try:
                    os.fchmod(fd, mode)
                finally:
                    os.close(fd)
            except OSError as e:
                raise _translate(e, path) from e
            return self._entry(dfd, name, "/" + "/".join([*parent, name]))

    def update(self, path: str, *, uid: int | None, gid: int | None, mode: int | None) -> Entry:
        """Changes the owner and mode of a file or directory (a symlink itself: owner only)."""
        parent, name = self._split(path)
        with self._dir(parent) as dfd:
            try:
                if uid is not None or gid is not None:
                    os.chown(
                        name,
                        -1 if uid is None else uid,
                        -1 if gid is None else gid,
                        dir_fd=dfd,
                        follow_symlinks=False,
                    )
                if mode is not None:
                    st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                    if stat.S_ISLNK(st.st_mode):
                        raise InvalidRequest(f"{path!r} is a symlink: its mode cannot change")
                    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dfd)
                    try:
                        os.fchmod(fd, mode)
                    finally:
                        os.close(fd)
            except OSError as e:
                raise _translate(e, path) from e
            return self._entry(dfd, name, "/" + "/".join([*parent, name]))

    def remove(self, path: str) -> None:
        """Removes a file, a symlink (itself) or a directory with everything in it."""
        parent, name = self._split(path)
        with self._dir(parent) as dfd:
            try:
                st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode):
                    self._rmtree(dfd, name)
                else:
                    os.unlink(name, dir_fd=dfd)
            except OSError as e:
                raise _translate(e, path) from e

    def _rmtree(self, parent_fd: int, name: str) -> None:
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent_fd)
        try:
            for child in os.listdir(fd):
                st = os.stat(child, dir_fd=fd, follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode):
                    self._rmtree(fd, child)
                else:
                    os.unlink(child, dir_fd=fd)
        finally:
            os.close(fd)
        os.rmdir(name, dir_fd=parent_fd)
