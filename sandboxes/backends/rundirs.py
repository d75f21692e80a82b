"""Run dirs and owner records on this host, shared by the local and docker backends (and the id
ranges and the watchdog): where pool dirs live, who owns one (pid and start time, so a reused pid
is never taken for its owner), and small atomic JSON records."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import stat
import time
from pathlib import Path
from typing import Any

from ..errors import LaunchError

__all__ = [
    "OWNER_FILE",
    "RUN_DIR_ENV",
    "alive",
    "dead_pool_dirs",
    "default_run_root",
    "make_pool_dir",
    "make_private_dir",
    "read_json",
    "starttime",
    "volatile_dir",
    "write_json",
]

RUN_DIR_ENV = "SANDBOXES_RUN_DIR"
OWNER_FILE = "owner.json"  # {"pid", "starttime"} of the process that owns a pool dir
UNOWNED_GRACE_S = 60.0  # a pool dir without its owner file younger than this is being created


def default_run_root() -> Path:
    """Where pool dirs live on this host (their layout: `backends/local.py`'s docstring)."""
    env = os.environ.get(RUN_DIR_ENV)
    if env:
        return Path(env)
    if os.geteuid() == 0:
        return volatile_dir("/run") / "sandboxes"
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg:
        return Path(xdg) / "sandboxes"
    return volatile_dir("/tmp") / f"sandboxes-{os.getuid()}"


@functools.cache
def volatile_dir(preferred: str) -> Path:
    """`preferred` where it is a tmpfs (as `/run` is on a systemd host), else `/dev/shm` where
    that is one (a container's `/run`, a host whose `/run` or `/tmp` is on its disk), else
    `preferred`. Every sandbox makes and removes a few small files in its run root and id dir (a
    dir, a socket, records): on a journaled disk's file system that costs more CPU than the rest
    of the manager's work for a create (`python -m bench rollouts`)."""
    for d in (preferred, "/dev/shm"):
        if _filesystem(d) == "tmpfs":
            return Path(d)
    return Path(preferred)


def _filesystem(path: str) -> str | None:
    """The type of the file system `path` is on (the longest mount point above it), None if
    unknown."""
    try:
        real = os.path.realpath(path)
        with open("/proc/self/mounts") as f:
            mounts = [line.split()[1:3] for line in f]
    except OSError:
        return None
    best, kind = "", None
    for point, fstype in mounts:
        point = point.replace("\\040", " ")
        inside = real == point or real.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, fstype
    return kind


def read_small(path: str) -> bytes:
    """The first 4 KiB of the file `path` (not a symlink), read with plain system calls: the
    records and /proc files a sandbox's start and end read are that small, and a file object
    costs more than the read."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    try:
        return os.read(fd, 4096)
    finally:
        os.close(fd)


def replace_file(path: str, data: bytes, tmp: str) -> None:
    """`data` as `path`, through `tmp` and a rename (a reader sees the old file or the new one),
    with plain system calls; neither is followed if a symlink."""
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW, 0o666)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _stat_fields(pid: int) -> list[bytes] | None:
    """The fields of /proc/PID/stat after the command, None if the process is gone."""
    try:
        stat = read_small(f"/proc/{pid}/stat")
    except OSError:
        return None
    return stat[stat.rfind(b")") + 2 :].split()


def starttime(pid: int) -> int | None:
    """Start time of `pid` in clock ticks since boot (field 22 of /proc/pid/stat), None if gone."""
    fields = _stat_fields(pid)
    return None if fields is None else int(fields[19])


def alive(pid: Any, starttime: Any) -> bool:
    """True when `pid` runs, is not a zombie and is the same process (same start time)."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    fields = _stat_fields(pid)
    if fields is None or fields[0] in (b"Z", b"X"):
        return False
    return starttime is None or int(fields[19]) == starttime


def make_private_dir(p: Path) -> None:
    """`p` made if missing; a directory of ours (not a link to one) that only we can enter. It
    may live in a directory everyone writes (`/dev/shm`, `/tmp`), where another user could have
    made it first."""
    with contextlib.suppress(FileExistsError):
        p.mkdir(mode=0o700, parents=True)
    st = p.lstat()
    if not stat.S_ISDIR(st.st_mode):
        raise LaunchError(f"run dir {p} is not a directory", step="run_dir")
    if st.st_uid != os.geteuid():
        raise LaunchError(f"run dir {p} is owned by uid {st.st_uid}, not us", step="run_dir")
    if stat.S_IMODE(st.st_mode) != 0o700:
        os.chmod(p, 0o700)


def write_json(path: Path, obj: dict) -> None:
    """`obj` as `path`, replaced whole (`replace_file`)."""
    replace_file(str(path), json.dumps(obj).encode(), f"{path}.tmp")


def read_json(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def make_pool_dir(run_root: Path, pool_dir: Path) -> None:
    """Make `pool_dir` (0700, under a private `run_root`) owned by this process (`OWNER_FILE`)."""
    make_private_dir(run_root)
    pool_dir.mkdir(mode=0o700, exist_ok=True)
    me = os.getpid()
    write_json(pool_dir / OWNER_FILE, {"pid": me, "starttime": starttime(me)})


def dead_pool_dirs(run_root: Path, pattern: str, mine: Path) -> list[Path]:
    """The pool dirs matching `pattern` under `run_root` whose owner is dead (one without an
    owner file once it is older than `UNOWNED_GRACE_S`), `mine` never."""
    if not run_root.is_dir():
        return []
    dead = []
    for d in sorted(run_root.glob(pattern)):
        if d == mine or not d.is_dir():
            continue
        owner = read_json(d / OWNER_FILE)
        if owner is None:
            try:
                if time.time() - d.stat().st_mtime < UNOWNED_GRACE_S:
                    continue
            except FileNotFoundError:
                continue
        elif alive(owner.get("pid"), owner.get("starttime")):
            continue
        dead.append(d)
    return dead
