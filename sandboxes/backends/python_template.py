"""The local backend's Python templates: one prewarmed interpreter outside every sandbox, from which
each sandbox's Python zygote, and its first Python run, made in place of one, are forks
(`sandbox_exec::template`, `zygote.py`'s template role), so that a sandbox's first Python run costs
a fork, not an interpreter's start.

The template is `/usr/bin/python3` of this host, started as root with an empty environment; it
serves the sandboxes whose `/usr` is this host's (no image, no checkpoint layers) of a root
manager, whose programs have a user namespace and ids of their own. Each launch of such a sandbox
is given the template's socket path; the launcher connects and hands the agent the connection.
The template never runs a sandbox's code and never reads a sandbox's request; what its zygotes
share is its address-space layout and string-hash seed, so it is replaced after `MAX_SANDBOXES`
sandboxes or `MAX_AGE_S` seconds: its socket is removed and its retirement pipe closed, it serves
the sandboxes it has until they are gone, then exits. It dies with this process. A template that
does not start in time is retried after `RETRY_S`; meanwhile sandboxes start their own zygotes, as
they do without one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from .. import _bridge
from ..templates import Template

log = logging.getLogger(__name__)

__all__ = ["PythonTemplates", "eligible"]

PYTHON = "/usr/bin/python3"  # the sandboxes' own interpreter: /usr is the host's, bound read-only
MAX_SANDBOXES = 1000
MAX_AGE_S = 600.0
START_TIMEOUT_S = 10.0
RETRY_S = 30.0
STOP_S = 5.0


def eligible(template: Template) -> bool:
    """Whether sandboxes of `template` can have their zygote made from this host's template."""
    return (
        os.geteuid() == 0
        and template.python_zygote != "off"
        and not template.image
        and not template.layers
        and os.access(PYTHON, os.X_OK)
    )


@dataclass
class _Process:
    proc: asyncio.subprocess.Process
    path: Path
    retire: int  # the write end of its retirement pipe (-1: closed)
    started: float
    given: int = 0

    def retire_now(self) -> None:
        """No new sandbox reaches it; it ends once its sandboxes are gone."""
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        if self.retire >= 0:
            os.close(self.retire)
            self.retire = -1


class PythonTemplates:
    """The template processes of one backend, whose sockets live in `run_dir` (private)."""

    def __init__(self, run_dir: Path) -> None:
        self._run_dir = run_dir
        self._current: _Process | None = None
        self._retired: list[_Process] = []
        self._starting: asyncio.Lock | None = None
        self._failed_at = -RETRY_S
        self._n = 0

    async def path_for(self, template: Template) -> str:
        """The socket a launch of `template` is given ("": none; its agent starts its zygote)."""
        if not eligible(template):
            return ""
        cur = self._current
        if cur is None or not self._serves(cur):
            self._starting = self._starting or asyncio.Lock()
            async with self._starting:
                cur = self._current
                if cur is None or not self._serves(cur):
                    cur = await self._replace()
        if cur is None:
            return ""
        cur.given += 1
        return str(cur.path)

    def _serves(self, p: _Process) -> bool:
        return (
            p.proc.returncode is None and p.given < MAX_SANDBOXES and time.monotonic() - p.started < MAX_AGE_S
        )

    async def _replace(self) -> _Process | None:
        old, self._current = self._current, None
        if old is not None:
            self._retire(old)
        if time.monotonic() - self._failed_at < RETRY_S:
            return None
        try:
            self._current = await self._start()
        except (OSError, TimeoutError, RuntimeError) as e:
            self._failed_at = time.monotonic()
            log.warning("no python template (%s); sandboxes start their own zygotes", e)
        return self._current

    async def _start(self) -> _Process:
        self._n += 1
        path = self._run_dir / f"python-template-{self._n}.sock"
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        retire_r, retire_w = os.pipe()
        try:
            listener.bind(str(path))
            listener.listen(128)
            argv = _bridge.api().python_template_command(PYTHON, listener.fileno(), retire_r)
            proc = await asyncio.create_subprocess_exec(
                *argv,
                env={},
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                pass_fds=[listener.fileno(), retire_r],
                start_new_session=True,
            )
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            os.close(retire_w)
            raise
        finally:
            listener.close()
            os.close(retire_r)
        p = _Process(proc, path, retire_w, time.monotonic())
        try:
            assert proc.stdout is not None
            line = await asyncio.wait_for(proc.stdout.readline(), START_TIMEOUT_S)
            if line != b"ready\n":
                raise RuntimeError(f"the python template exited ({await proc.wait()})")
        except BaseException:
            await self._stop(p)
            raise
        log.info("python template %s started (pid %s)", path.name, proc.pid)
        return p

    def _retire(self, p: _Process) -> None:
        p.retire_now()
        self._retired = [r for r in self._retired if r.proc.returncode is None]
        self._retired.append(p)

    async def _stop(self, p: _Process) -> None:
        """Retired, it ends by itself once its agents are gone (they are, at the backend's close):
        killed while it forks, its child would be left to this process to reap."""
        p.retire_now()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(p.proc.wait()), STOP_S)
        if p.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                p.proc.kill()
        await p.proc.wait()

    async def close(self) -> None:
        """Stop every template process (their sandboxes are gone by now)."""
        procs = [*self._retired, *([self._current] if self._current else [])]
        self._current, self._retired = None, []
        for p in procs:
            await self._stop(p)
