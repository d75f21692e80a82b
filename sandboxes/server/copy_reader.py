"""The reader of a template build's copy step: an uploaded archive, read in a process of its own.

`python -I .../copy_reader.py ARCHIVE SRC DEST MODE MAX_ENTRIES MAX_BYTES` (`template_build.py`
starts it, one per copy step): the archive is read as a stream, one entry at a time, never as a
list of its members, so what an archive costs is this process's time and a few MiB, not the
server's memory, its event loop or its threads (a million empty files are a million headers to
parse, seconds of one CPU). It imports only the standard library, lowers its own priority and
bounds its address space: a header that asks for more memory ends it with an error.

The archive is read twice. First its headers, every entry's: past MAX_ENTRIES entries or
MAX_BYTES of file data, or at a matching path that leaves the archive, it stops with an error
before anything is written; a `{"read": n}` line every `PROGRESS` entries, and
`{"checked": n, "matched": m}` at the end, let the server count them against the key's bound.
Then what the copy of SRC puts at DEST (as Docker's COPY places it: a file into a DEST ending in
`/`, or when several match; a directory's contents under DEST), in the archive's order, one
JSON line each:

    {"file": path, "mode": m, "size": n}   then the file's n bytes
    {"dir": path}
    {"link": path, "to": target}

and last `{"end": n}`; or, at any point, `{"error": message}`.
"""

from __future__ import annotations

import fnmatch
import json
import os
import posixpath
import resource
import sys
import tarfile
from typing import IO, Any

from sandboxes import tar_stream

PROGRESS = 1000  # entries between two `read` lines
MAX_PATH = 4096  # bytes of a path or a link's target the reader passes on
MEMORY_BYTES = 512 << 20  # the reader's address space
CHUNK = 1 << 20


class BadArchive(Exception):
    """The archive is not one a copy takes: the message says why."""


class Copy:
    """Where the entries of the archive go for the copy of `src` to `dest`."""

    def __init__(self, src: str, dest: str, mode: int | None) -> None:
        self.pattern = posixpath.normpath(src.lstrip("/")) if src not in ("", ".") else "."
        self.globbed = any(c in self.pattern for c in "*?[")
        self.base = posixpath.dirname(self.pattern) if self.globbed else self.pattern
        self.dest, self.mode = dest, mode
        self.single_file = False  # the one entry matched is a file: it is `dest` itself

    def matches(self, name: str) -> bool:
        if self.pattern == ".":
            return True
        if self.globbed:
            top = name.split("/")[: self.pattern.count("/") + 1]
            return fnmatch.fnmatchcase("/".join(top), self.pattern)
        return name == self.pattern or name.startswith(self.pattern + "/")

    def target(self, m: tarfile.TarInfo) -> str:
        name = posixpath.normpath(m.name)
        if name == self.pattern and (self.single_file or m.isdir()):
            target = self.dest  # the file itself, or the directory whose contents go to dest
        elif name == self.pattern or (self.globbed and fnmatch.fnmatchcase(name, self.pattern)):
            target = posixpath.join(self.dest, posixpath.basename(name))
        else:
            target = posixpath.join(self.dest, posixpath.relpath(name, self.base if self.base != "." else ""))
        return posixpath.normpath(target)


def check(archive: str, copy: Copy, max_entries: int, max_bytes: int, out: IO[bytes]) -> int:
    """The first reading: the bounds and the matching paths; how many entries match."""
    entries = total = matched = 0
    first: tarfile.TarInfo | None = None
    with tarfile.open(archive, mode="r|*") as tar:
        for m in tar_stream.entries(tar):
            entries += 1
            if entries > max_entries:
                raise BadArchive(
                    f"the archive has more than {max_entries} entries: a copy reads at most {max_entries}"
                )
            total += max(m.size, 0)
            if total > max_bytes:
                raise BadArchive(f"a copy unpacks to more than {max_bytes >> 20} MiB")
            if entries % PROGRESS == 0:
                _line(out, {"read": entries})
            name = posixpath.normpath(m.name)
            if not copy.matches(name):
                continue
            if name.startswith(("/", "../")) or name == "..":
                raise BadArchive(f"the archive holds a path outside it: {m.name[:200]!r}")
            if len(m.name.encode()) > MAX_PATH or len(m.linkname.encode()) > MAX_PATH:
                raise BadArchive(f"the archive holds a path longer than {MAX_PATH} bytes")
            matched += 1
            if first is None:
                first = m
    copy.single_file = matched == 1 and first is not None and first.isfile() and not copy.dest.endswith("/")
    _line(out, {"checked": entries, "matched": matched})
    return matched


def place(archive: str, copy: Copy, out: IO[bytes]) -> int:
    """The second reading: the matching entries' records, file data included."""
    n = 0
    with tarfile.open(archive, mode="r|*") as tar:
        for m in tar_stream.entries(tar):
            if not copy.matches(posixpath.normpath(m.name)):
                continue
            n += 1
            target = copy.target(m)
            if m.isfile():
                mode = copy.mode if copy.mode is not None else m.mode & 0o777
                _line(out, {"file": target, "mode": mode, "size": m.size})
                f = tar.extractfile(m)
                left = m.size
                while left > 0 and f is not None:
                    chunk = f.read(min(CHUNK, left))
                    if not chunk:
                        raise BadArchive(f"the archive ends inside {m.name[:200]!r}")
                    out.write(chunk)
                    left -= len(chunk)
            elif m.issym():
                _line(out, {"link": target, "to": m.linkname})
            elif m.isdir():
                _line(out, {"dir": target})
    return n


def _line(out: IO[bytes], record: dict[str, Any]) -> None:
    out.write(json.dumps(record, separators=(",", ":")).encode() + b"\n")


def main(argv: list[str]) -> int:
    archive, src, dest, mode, max_entries, max_bytes = argv
    os.nice(10)  # the server's own work comes first on a busy host
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    out = sys.stdout.buffer
    copy = Copy(src, dest, int(mode, 8) if mode else None)
    try:
        if check(archive, copy, int(max_entries), int(max_bytes), out):
            _line(out, {"end": place(archive, copy, out)})
    except BadArchive as e:
        _line(out, {"error": str(e)})
    except MemoryError:
        _line(out, {"error": "the archive needs more memory than a copy may take"})
    except Exception as e:  # noqa: BLE001 - a malformed archive, whichever way tarfile says so
        _line(out, {"error": f"the archive cannot be read: {type(e).__name__}: {e}"[:1000]})
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
