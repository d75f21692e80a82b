"""Host id ranges of local sandboxes: each gets 65,536 host uids/gids no other sandbox has.

A sandbox's programs run in a user namespace mapping its ids 0..65535 to the host's
`base..base+65535` (root inside is `base`, the default uid 65534 is `base+65534`), so per-uid
kernel limits (processes, inotify instances, message queues) and file ownership are never
shared between sandboxes. Ranges are slots above every ordinary account and subordinate-id range
(`FIRST_ID` = 2**28), claimed host-wide (across pools and processes) by a file per slot under
`id_dir()` (`sandboxes-ids` in the host's volatile run dir: `/run`, else `/dev/shm`), written
under an exclusive lock and holding its owner (pid and start time of the pool's
process) and, for a sandbox that can outlive its pool (a docker container lives on until its
agent's lease lapses), a holder path (its run dir, removed with the container). A slot whose
owner is gone and whose holder path is gone too is free again: a pool killed with SIGKILL leaks
none, and no new sandbox gets the ids of a container still running.
A manager that is not root (a docker-group user of the docker backend) claims in its own run
root instead (`id_dir`): its ranges are unique among its own pools. A backend claims and
releases from its event loop (`claim_async`, `release_soon`): there while the lock is free, in a
thread while another process holds it.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import os
import random
from collections.abc import Iterator
from pathlib import Path

from ..errors import LaunchError
from .rundirs import (
    alive,
    default_run_root,
    make_private_dir,
    read_small,
    replace_file,
    starttime,
    volatile_dir,
)

__all__ = [
    "FIRST_ID",
    "RANGE",
    "SLOTS",
    "claim",
    "claim_async",
    "id_dir",
    "release",
    "release_owned_by",
    "release_soon",
]

RANGE = 1 << 16
FIRST_ID = 1 << 28
SLOTS = 16384


def id_dir() -> Path:
    """Where this manager claims ranges: host-wide for root, else in its own run root."""
    return volatile_dir("/run") / "sandboxes-ids" if os.geteuid() == 0 else default_run_root() / "ids"


class _Busy(Exception):
    """The lock is held by someone else (`block=False`)."""


_PRIVATE: set[Path] = set()  # id dirs this process made or checked (`make_private_dir`)


@contextlib.contextmanager
def _locked(root: Path, block: bool = True) -> Iterator[None]:
    if root not in _PRIVATE:
        make_private_dir(root)  # once per process: it may be in /dev/shm, which everyone writes
        _PRIVATE.add(root)
    fd = os.open(f"{root}/.lock", os.O_CREAT | os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if block else fcntl.LOCK_NB))
        except BlockingIOError:
            raise _Busy from None
        yield
    finally:
        os.close(fd)


_OWNERS: dict[int, str] = {}


def _owner() -> str:
    """This process as a slot's owner: its pid and start time (read once per process)."""
    pid = os.getpid()
    if pid not in _OWNERS:
        _OWNERS[pid] = f"{pid} {starttime(pid)}"
    return _OWNERS[pid]


def _stale(path: Path) -> bool:
    try:
        pid, start, *rest = path.read_text().split(maxsplit=3)
        return not alive(int(pid), int(start)) and not _held(rest)
    except (OSError, ValueError):
        return True


def _held(rest: list[str]) -> bool:
    """Whether the holder path of a slot (its fields after the owner) still exists."""
    return len(rest) > 1 and os.path.lexists(rest[1].rstrip("\n"))


def claim(
    sandbox_id: str, root: Path | None = None, *, holder: Path | None = None, block: bool = True
) -> int:
    """The first host id of a range no live sandbox of this host holds; `holder`: a path that
    exists as long as the sandbox may run (the range stays held while it does). Without `block`,
    `_Busy` when another claim or release holds the host's lock."""
    root = root or id_dir()
    try:
        return _claim(sandbox_id, root, holder, block)
    except OSError as e:
        raise LaunchError(f"cannot claim a host id range in {root}: {e}", step="id_range") from e


async def claim_async(sandbox_id: str, root: Path | None = None, *, holder: Path | None = None) -> int:
    """`claim` from an event loop: on the loop while the host's lock is free (the usual case, a
    fraction of a millisecond), else in a thread, so that another process holding the lock never
    stalls the loop."""
    try:
        return claim(sandbox_id, root, holder=holder, block=False)
    except _Busy:
        pass
    made = asyncio.get_running_loop().run_in_executor(
        None, functools.partial(claim, sandbox_id, root, holder=holder)
    )
    try:
        return await asyncio.shield(made)
    except asyncio.CancelledError:
        # The thread's claim goes on: what it claims for nobody is freed as soon as it is made.
        def free(f: asyncio.Future[int]) -> None:
            if not f.cancelled() and f.exception() is None:
                release_soon(f.result(), sandbox_id, root)

        made.add_done_callback(free)
        raise


def _claim(sandbox_id: str, root: Path, holder: Path | None, block: bool) -> int:
    with _locked(root, block):
        start = random.randrange(SLOTS)  # few collisions between hosts' pools, no list to shuffle
        for i in range(SLOTS):
            slot = (start + i) % SLOTS
            path = f"{root}/{slot}"
            if os.path.exists(path) and not _stale(Path(path)):
                continue
            line = f"{_owner()} {sandbox_id}" + (f" {holder}" if holder else "") + "\n"
            replace_file(path, line.encode(), f"{root}/.{slot}.{os.getpid()}")
            return FIRST_ID + slot * RANGE
    raise LaunchError(f"all {SLOTS} id ranges of this host are in use", step="id_range")


def release(base: int, sandbox_id: str, root: Path | None = None, *, block: bool = True) -> None:
    """Frees the range starting at `base` if `sandbox_id` holds it (idempotent). Without `block`,
    `_Busy` when another claim or release holds the host's lock."""
    root = root or id_dir()
    slot, rest = divmod(base - FIRST_ID, RANGE)
    if rest or not 0 <= slot < SLOTS:
        return
    path = f"{root}/{slot}"
    with _locked(root, block):
        try:
            held = read_small(path).decode(errors="replace").split()
        except OSError:
            return
        if held[2:3] == [sandbox_id]:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)


def release_soon(base: int, sandbox_id: str, root: Path | None = None) -> None:
    """`release` from an event loop, which it never stalls: there while the host's lock is free,
    else in a thread of the loop's that finishes it whatever becomes of the caller (a cancelled
    destroy still frees its range)."""
    try:
        release(base, sandbox_id, root, block=False)
    except _Busy:
        asyncio.get_running_loop().run_in_executor(None, release, base, sandbox_id, root)


def release_owned_by(pid: int, starttime: int | None, root: Path | None = None) -> int:
    """Frees every range held by the process `pid` (started at `starttime`) whose holder path is
    gone; returns how many."""
    root = root or id_dir()
    if not root.is_dir():
        return 0
    freed = 0
    with _locked(root):
        for path in root.iterdir():
            if not path.name.isdigit():
                continue
            try:
                held = path.read_text().split(maxsplit=3)
            except OSError:
                continue
            if held[:2] == [str(pid), str(starttime)] and not _held(held[2:]):
                path.unlink(missing_ok=True)
                freed += 1
    return freed
