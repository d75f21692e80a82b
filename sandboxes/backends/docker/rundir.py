"""One sandbox's run dir on the host, mounted at `RUN_MOUNT` in its container: the token the
agent reads, the FIFO its readiness comes through, its socket and its start-up log."""

from __future__ import annotations

import asyncio
import os
import socket
import struct
from pathlib import Path

from .. import readiness

_LOG_TAIL = 2000


def prepare(run_dir: Path, token: str) -> int:
    """Make the run dir with its token file and readiness FIFO; returns the FIFO's read end
    (non-blocking: opening it does not wait for the writer)."""
    run_dir.mkdir(mode=0o700)
    fd = os.open(run_dir / "token", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, token.encode())
    finally:
        os.close(fd)
    os.mkfifo(run_dir / "ready", 0o600)
    return os.open(run_dir / "ready", os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)


async def await_ready(loop: asyncio.AbstractEventLoop, fd: int) -> bytes:
    """Wait (no thread, no polling) until the FIFO has the agent's report (its ready byte or its
    failure record, which arrives whole) or its writer went away without one (b""). Closes `fd`."""
    fut: asyncio.Future[bytes] = loop.create_future()

    def readable() -> None:
        # Before any writer opened the FIFO the kernel does not report it readable; after one
        # did, readable means data or end-of-file.
        try:
            data = os.read(fd, readiness.MAX_RECORD)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not fut.done():
            fut.set_result(data)

    loop.add_reader(fd, readable)
    try:
        return await fut
    finally:
        loop.remove_reader(fd)
        os.close(fd)


def peer_pid(sock: Path) -> int | None:
    """The agent's pid as this host sees it (SO_PEERCRED of its socket); None if unavailable."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(1.0)
            s.connect(str(sock))
            cred = s.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        pid = struct.unpack("3i", cred)[0]
        return pid if pid > 0 else None
    except OSError:
        return None


def log_tail(run_dir: Path) -> str:
    """The end of the agent's stderr (what it said before it died)."""
    try:
        with open(run_dir / "agent.log", "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - _LOG_TAIL))
            text = f.read().decode(errors="replace").strip()
    except OSError:
        return "(no output)"
    return text or "(no output)"
