"""Run dirs and owner records on this host, shared by the local and docker backends (and the id
ranges and the watchdog): where pool dirs live, who owns one (pid and start time, so a reused pid
is never taken for its owner), and small atomic JSON records."""

from __future__ import annotations

import json
import os
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
        return Path("/run/sandboxes")
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg:
        return Path(xdg) / "sandboxes"
    return Path(f"/tmp/sandboxes-{os.getuid()}")


def starttime(pid: int) -> int | None:
    """Start time of `pid` in clock ticks since boot (field 22 of /proc/pid/stat), None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    return int(fields[19])


def alive(pid: Any, starttime: Any) -> bool:
    """True when `pid` runs, is not a zombie and is the same process (same start time)."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    fields = stat[stat.rfind(")") + 2 :].split()
    if fields[0] in ("Z", "X"):
        return False
    return starttime is None or int(fields[19]) == starttime


def make_private_dir(p: Path) -> None:
    p.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = p.stat()
    if st.st_uid != os.geteuid():
        raise LaunchError(f"run dir {p} is owned by uid {st.st_uid}, not us", step="run_dir")


def write_json(path: Path, obj: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj))
    os.replace(tmp, path)


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
