"""Daytona's process sessions: a shell per session whose commands share its state (`cd`,
exported variables), run one after another.

A session is one long-lived shell in the sandbox (bash when the image has it, else sh), fed on
its stdin. A command is written by the agent to `<dir>/<id>.sh` and sourced by the shell with its
output to `<dir>/<id>.out` / `.err` and its stdin from /dev/null; the shell then prints a marker
line with the exit status on its own stdout, which the server reads. So a syntax error is that
command's status, never the session's end, and what a command prints can never be taken for a
marker. A command that ends the shell (`exit 3`) reports its status from the shell's EXIT trap;
the session's next command starts a new shell (the state kept is then the files'). `<dir>` is
`/tmp/.sessions/<session>` inside the sandbox, removed with the session.

A session's shell is a program of the sandbox's `Holder` (`server/programs.py`, kind
`daytona.session`), not charged: each command holds one of the owner's exec slots until it ends
(`Command.release`). The sessions go with the sandbox (deleted, or stopped: a started sandbox
has none of the last one's); the holder keeps them (`Holder.state`).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import shlex
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sandboxes import errors as E
from sandboxes.types import Limits

__all__ = ["KIND", "Session", "Sessions"]

KIND = "daytona.session"  # of the sessions' shells among a sandbox's long-lived programs
MAX_SESSIONS = 64
MAX_COMMANDS = 1000
MAX_LOG_BYTES = 16 << 20
SESSION_LIMITS = Limits(wall_time_s=24 * 3600.0, cpu_time_s=24 * 3600.0)
_ID = re.compile(r"[A-Za-z0-9._-]{1,128}")
_MARK = "\x1esandboxes-session"
_SHELL = "command -v bash >/dev/null 2>&1 && exec bash --norc --noprofile; exec sh"


@dataclass
class Command:
    id: str
    command: str
    exit_code: int | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)
    # Gives back the exec slot the command holds while it runs (`ServerCore.session`).
    release: Callable[[], None] = lambda: None

    def finish(self, exit_code: int) -> None:
        if self.exit_code is None:
            self.exit_code = exit_code
        self.done.set()
        self.release()

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "command": self.command, "exitCode": self.exit_code}


class Session:
    """One session's shell, a program of `programs` (the sandbox's `Holder`)."""

    def __init__(self, session_id: str, programs: Any, cwd: str, env: dict[str, str]) -> None:
        self.id = session_id
        self.programs = programs
        self.sb = programs.sandbox
        self.dir = f"/tmp/.sessions/{session_id}"
        self.commands: dict[str, Command] = {}
        self._cwd, self._env = cwd, env
        self._lock = asyncio.Lock()
        self._spawn()

    def _spawn(self) -> None:
        """A new shell for the session (its first, or after a command ended the last one)."""
        self._stream = self.programs.start(
            KIND,
            self.id,
            ["/bin/sh", "-c", _SHELL],
            charge=None,
            cwd=self._cwd,
            env=self._env,
            keep_descendants=True,
            limits=SESSION_LIMITS,
        )
        self._reader = asyncio.ensure_future(self._read())

    async def start(self) -> None:
        # A command that ends the shell (`exit 3`) still reports its status, from the EXIT trap.
        q = shlex.quote
        # The shell's own stdout is fd 9: what a command prints goes to its files, the markers
        # (which only the shell and that command know the id of) to fd 9.
        trap = f"printf '%s %s %d\\n' {q(_MARK)} \"$__cmd\" $? >&9"
        await self._stream.send_stdin(
            f"exec 9>&1; mkdir -p {q(self.dir)}; __cmd=; trap {q(trap)} EXIT\n".encode()
        )

    async def _read(self) -> None:
        """Reads the shell's markers (`<mark> <command id> <status>`) as commands end."""
        pending = b""
        try:
            async for ev in self._stream:
                if ev.kind != "stdout":
                    continue
                pending += ev.data
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    parts = line.decode(errors="replace").split(" ")
                    c = self.commands.get(parts[1]) if len(parts) == 3 and parts[0] == _MARK else None
                    if c is not None and c.exit_code is None:
                        c.finish(int(parts[2]))
        except E.SandboxError:
            pass  # the shell was ended (its session deleted, its sandbox gone) or lost
        finally:
            for c in self.commands.values():  # the shell ended: nothing more will end
                c.finish(-1)

    async def run(self, command: str, release: Callable[[], None]) -> Command:
        """Starts `command` in the shell; its `Command` (await `done` for its end), which calls
        `release` as it ends."""
        if len(self.commands) >= MAX_COMMANDS:
            raise E.QuotaExceeded(f"a session runs at most {MAX_COMMANDS} commands")
        c = Command(id=str(uuid.uuid4()), command=command, release=release)
        base = f"{self.dir}/{c.id}"
        async with self._lock:  # one command after another, as the shell runs them
            if self._reader.done():  # the last command ended the shell: the session goes on in a new one
                self._spawn()
                await self.start()
            await self.sb.write_files({f"{base}.sh": command.encode()})
            self.commands[c.id] = c
            q = shlex.quote
            line = f"__cmd={c.id}; . {q(base + '.sh')} </dev/null >{q(base + '.out')} 2>{q(base + '.err')}; "
            line += f"printf '%s %s %d\\n' {q(_MARK)} {c.id} $? >&9\n"
            await self._stream.send_stdin(line.encode())
        return c

    async def logs(self, c: Command) -> tuple[bytes, bytes]:
        """What `c` printed so far: (stdout, stderr)."""
        return await self.read(c, "stdout"), await self.read(c, "stderr")

    async def read(self, c: Command, stream: str, offset: int = 0) -> bytes:
        """What `c` printed on `stream` ("stdout" or "stderr") from `offset` on."""
        path = f"{self.dir}/{c.id}{'.out' if stream == 'stdout' else '.err'}"
        try:
            return await self.sb.read_file(path, offset=offset, max_bytes=MAX_LOG_BYTES)
        except E.NotFound:
            return b""

    def to_json(self) -> dict[str, Any]:
        return {"sessionId": self.id, "commands": [c.to_json() for c in self.commands.values()]}

    async def close(self) -> None:
        self._stream.cancel()
        self._reader.cancel()
        with contextlib.suppress(BaseException):
            await self._reader
        with contextlib.suppress(E.SandboxError):
            await self.sb.remove(self.dir, recursive=True)


class Sessions:
    """The sessions of one sandbox, whose `Holder` is `programs` (which keeps this too)."""

    def __init__(self, programs: Any) -> None:
        self.programs = programs
        self.by_id: dict[str, Session] = {}

    @staticmethod
    def of(programs: Any) -> Sessions:
        """The sessions of the sandbox whose `Holder` is `programs`."""
        sessions: Sessions = programs.state(KIND, lambda: Sessions(programs))
        return sessions

    async def create(self, session_id: str, cwd: str, env: dict[str, str]) -> Session:
        if not isinstance(session_id, str) or not _ID.fullmatch(session_id):
            raise E.InvalidRequest("sessionId must be 1 to 128 letters, digits, '.', '_' or '-'")
        if session_id in self.by_id:
            raise E.InvalidRequest(f"session {session_id} already exists")
        if len(self.by_id) >= MAX_SESSIONS:
            raise E.QuotaExceeded(f"a sandbox has at most {MAX_SESSIONS} sessions")
        s = Session(session_id, self.programs, cwd, env)
        self.by_id[session_id] = s
        await s.start()
        return s

    def get(self, session_id: str) -> Session:
        s = self.by_id.get(session_id)
        if s is None:
            raise E.NotFound(f"session {session_id} not found")
        return s

    async def delete(self, session_id: str) -> None:
        s = self.get(session_id)
        del self.by_id[session_id]
        await s.close()
