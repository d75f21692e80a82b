"""A tar archive read as a stream: every reader of an archive a caller or a sandbox made (a
template's copied files, an image's layers) walks it with `entries`, never `getmembers()`."""

from __future__ import annotations

import tarfile
from collections.abc import Iterator

__all__ = ["entries"]


def entries(tar: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
    """The entries of `tar` in order, each forgotten once the next is read (a `TarFile` keeps a
    list of every entry it has read: an archive of a million files would be that many in
    memory)."""
    members: list[tarfile.TarInfo] = vars(tar)["members"]
    while (m := tar.next()) is not None:
        members.clear()
        yield m
