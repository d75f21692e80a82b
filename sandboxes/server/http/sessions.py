"""Programs that outlive one request: the command sessions of the Connect process services (the
Prime gateway's `command_session.CommandSession`, E2B's `process.Process`).

Both platforms speak the same shape: a program starts and its stream announces `start{pid}`,
then `data{stdout|stderr}` chunks, keepalives while it is quiet, and `end{exit_code, exited,
status, error}`. `Programs` holds that shape once, over the agent's exec stream; each service
supplies its messages (`event`: the event class with its nested `StartEvent`, `DataEvent`,
`EndEvent`, `KeepAlive`), how an exit reads on its platform (`end_of`), and whether a program
whose starting stream goes away is killed (`kill_orphans`). A program may be named (Prime's
`session_uuid` / `tag`, E2B's `tag`): a named one can be re-attached, and its end is replayed
for `RETAIN_S`. A running program is held by its sandbox's `Holder` (`server/programs.py`,
under the service's `attr` as its kind): it holds one exec slot of its key's quota until it ends,
and ends with its sandbox.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from connectrpc.code import Code
from connectrpc.errors import ConnectError

from sandboxes import errors as E
from sandboxes.types import Limits

if TYPE_CHECKING:
    from sandboxes.server.surface_core import SurfaceCore

__all__ = ["COMMAND_LIMITS", "DEFAULT_TIMEOUT_S", "KEEPALIVE_S", "Programs", "SandboxSessions", "Session"]

log = logging.getLogger("sandboxes.server.http")

KEEPALIVE_S = 10.0
RETAIN_S = 300.0
# Without a Connect-Timeout-Ms a command may run this long.
DEFAULT_TIMEOUT_S = 24 * 3600.0
MAX_SESSIONS_PER_SANDBOX = 1024
# A command is bounded by its deadline (wall time), not by CPU time: what it leaves running (a
# background job) inherits its CPU rlimit, so that one is as high as the longest deadline.
COMMAND_LIMITS = Limits(cpu_time_s=DEFAULT_TIMEOUT_S)
# For a service whose sessions are only streamed to whoever watches them, never kept whole (E2B's
# daemon caps no output; an interactive shell may run for hours): output is bounded only by the
# agent's ceiling, and flow control (`LISTENER_CHUNKS`) keeps the server from holding it.
STREAMED_LIMITS = Limits(cpu_time_s=DEFAULT_TIMEOUT_S, max_output_bytes=1 << 30)
# Output chunks (at most 64 KiB each) a listener may have unread: past it the session stops
# reading the program's output until the listener catches up (the program then waits, as on a
# terminal whose reader is slow), so a slow client never makes the server hold its output.
LISTENER_CHUNKS = 256
_SEEN_KEYS = 4096


@dataclass(eq=False)
class Session:
    """One program and whoever listens to it."""

    stream: Any  # sandboxes.ExecStream
    name: str | None
    spec: Any  # the request's program message (compared when a name is started again)
    terminal: bool = False  # on a pseudo-terminal: its output is `pty` data
    pid: int = 0
    end: Any = None  # the EndEvent once exited
    ended_at: float | None = None
    listeners: set[asyncio.Queue] = field(default_factory=set)
    seen_keys: dict[str, None] = field(default_factory=dict)
    pump: asyncio.Task | None = None

    def once(self, key: str | None) -> bool:
        """False for an idempotency key this session has already applied."""
        if not key:
            return True
        if key in self.seen_keys:
            return False
        self.seen_keys[key] = None
        while len(self.seen_keys) > _SEEN_KEYS:
            self.seen_keys.pop(next(iter(self.seen_keys)))
        return True

    def timed_out(self) -> bool:
        result = self.stream.result
        return bool(result is not None and result.timed_out)


class SandboxSessions:
    """The sessions of one sandbox."""

    def __init__(self) -> None:
        self.by_name: dict[str, Session] = {}
        self.by_pid: dict[int, Session] = {}
        self.live: set[Session] = set()

    def prune(self) -> None:
        now = time.monotonic()
        for name, s in list(self.by_name.items()):
            if s.ended_at is not None and now - s.ended_at > RETAIN_S:
                del self.by_name[name]
                self.by_pid.pop(s.pid, None)

    def find(self, selector: Any) -> Session | None:
        """The session a `{pid | tag | session_uuid}` selector names."""
        which = selector.WhichOneof("selector")
        if which == "pid":
            return self.by_pid.get(selector.pid)
        if which in ("session_uuid", "tag"):
            return self.by_name.get(getattr(selector, which))
        return None

    def running(self, selector: Any) -> Session:
        s = self.find(selector)
        if s is None:
            raise ConnectError(Code.NOT_FOUND, "no such process (it ended, or its retention expired)")
        if s.end is not None:
            raise ConnectError(Code.FAILED_PRECONDITION, "the process has exited")
        return s


class Programs:
    """The session core of one Connect process service (see the module's docstring)."""

    def __init__(
        self,
        event: Any,
        end_of: Callable[[Any], Any],
        *,
        core: SurfaceCore,
        kill_orphans: bool,
        attr: str,
        limits: Limits = COMMAND_LIMITS,
    ) -> None:
        self.event = event
        self.end_of = end_of
        self.core = core  # the server's core: its sandboxes' `Holder`s run the programs
        self.kill_orphans = kill_orphans
        # Where a record keeps its SandboxSessions, and the kind (and charged method) of its programs.
        self.attr = attr
        self.limits = limits  # of every program it starts

    def of(self, rec: Any) -> SandboxSessions:
        return rec.attrs.setdefault(self.attr, SandboxSessions())

    async def launch(
        self,
        rec: Any,
        spec: Any,
        argv: list[str],
        env: dict[str, str],
        cwd: str | None,
        *,
        stdin: bool,
        timeout_s: float,
        name: str | None,
        terminal: tuple[int, int] | None = None,
        user: str | None = None,
    ) -> Session:
        """Starts `argv` in `rec`'s sandbox as a session (its stdin open when `stdin`), on a
        pseudo-terminal of `terminal` = (rows, cols) when given, as its `user` (None: its
        programs' own)."""
        sessions = self.of(rec)
        if len(sessions.live) >= MAX_SESSIONS_PER_SANDBOX:
            raise ConnectError(
                Code.RESOURCE_EXHAUSTED, f"at most {MAX_SESSIONS_PER_SANDBOX} running processes"
            )
        try:
            stream = self.core.programs(rec).start(
                self.attr,
                None,
                argv,
                charge=self.attr,
                env=env or None,
                cwd=cwd,
                timeout=timeout_s,
                stdin=None if stdin else b"",
                limits=self.limits,
                keep_descendants=True,
                terminal=terminal,
                user=user,
            )
            first = await stream.__anext__()
        except BaseException as e:
            if isinstance(e, E.QuotaExceeded):
                raise ConnectError(Code.RESOURCE_EXHAUSTED, e.message) from None
            if isinstance(e, E.InvalidRequest):
                raise ConnectError(Code.INVALID_ARGUMENT, e.message) from None
            if isinstance(e, E.NotFound):
                raise ConnectError(Code.NOT_FOUND, e.message) from None
            if isinstance(e, E.SandboxError):
                raise ConnectError(Code.UNAVAILABLE, f"{e.kind.value}: {e.message}") from None
            raise
        s = Session(stream=stream, name=name, spec=spec, terminal=terminal is not None)
        if first.kind == "started":
            s.pid = first.pid or 0
        sessions.live.add(s)
        if name:
            sessions.prune()
            sessions.by_name[name] = s
        if s.pid:
            sessions.by_pid[s.pid] = s
        s.pump = asyncio.create_task(self._pump(s, sessions, first if first.kind != "started" else None))
        return s

    async def _pump(self, s: Session, sessions: SandboxSessions, pending: Any) -> None:
        """Reads the program's events and hands them to every listener."""
        result = None
        try:
            events = [pending] if pending is not None else []
            while True:
                for ev in events:
                    if ev.kind == "exit":
                        result = ev.result
                    elif ev.kind in ("stdout", "stderr"):
                        field = "pty" if s.terminal else ev.kind
                        msg = self.event(data=self.event.DataEvent(**{field: ev.data}))
                        for q in list(s.listeners):
                            await q.put(msg)  # a full queue holds the program back
                try:
                    events = [await s.stream.__anext__()]
                except StopAsyncIteration:
                    break
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - the sandbox went away mid-stream
            log.info("session %s ended without an exit: %s", s.name or s.pid, e)
        finally:
            s.stream.cancel()  # over: its exec slot is given back
            s.end = self.end_of(result)
            s.ended_at = time.monotonic()
            sessions.live.discard(s)
            if s.name is None and sessions.by_pid.get(s.pid) is s:
                del sessions.by_pid[s.pid]  # only named sessions are kept after their end
            for q in list(s.listeners):
                # A full queue gets no end: its listener sees `s.end` once it has read the rest.
                with contextlib.suppress(asyncio.QueueFull):
                    q.put_nowait(self.event(end=s.end))

    async def follow(self, s: Session, response: type, *, own: bool) -> AsyncIterator[Any]:
        """Events of `s` for one stream: start, output from now on, the end. `own`: the stream
        that started the session (whose end kills an unnamed one where `kill_orphans`)."""
        ev = self.event
        q: asyncio.Queue = asyncio.Queue(LISTENER_CHUNKS)
        ended = s.end is not None
        if not ended:
            # Listening before the first yield (no await in between since the pump was started):
            # no output of the program can pass before this stream hears it.
            s.listeners.add(q)
        finished = False
        try:
            yield response(event=ev(start=ev.StartEvent(pid=s.pid)))
            if ended:
                finished = True
                yield response(event=ev(end=s.end))
                return
            while True:
                if s.end is not None and q.empty():
                    msg = ev(end=s.end)  # its queue was full when the program ended
                else:
                    try:
                        msg = await asyncio.wait_for(q.get(), KEEPALIVE_S)
                    except TimeoutError:
                        yield response(event=ev(keepalive=ev.KeepAlive()))
                        continue
                if msg.WhichOneof("event") == "end":
                    finished = True
                    if s.timed_out():
                        raise ConnectError(
                            Code.DEADLINE_EXCEEDED, "the command ran past its deadline and was killed"
                        )
                    yield response(event=msg)
                    return
                yield response(event=msg)
        finally:
            s.listeners.discard(q)
            while not q.empty():  # a pump waiting for room in it goes on
                q.get_nowait()
            if own and not finished and s.name is None and self.kill_orphans:
                s.stream.cancel()

    @staticmethod
    def timeout_s(ctx: Any) -> float:
        """The call's `Connect-Timeout-Ms` in seconds, `DEFAULT_TIMEOUT_S` without one."""
        timeout_ms = ctx.timeout_ms
        return timeout_ms / 1000.0 if timeout_ms else DEFAULT_TIMEOUT_S

    @staticmethod
    async def send_stdin(s: Session, data: bytes) -> None:
        try:
            await s.stream.send_stdin(data)
        except E.SandboxError as e:
            raise ConnectError(Code.FAILED_PRECONDITION, f"stdin is closed: {e.message}") from None

    @staticmethod
    async def resize(s: Session, rows: int, cols: int) -> None:
        try:
            await s.stream.resize(rows, cols)
        except E.InvalidRequest as e:
            raise ConnectError(Code.INVALID_ARGUMENT, e.message) from None
        except E.SandboxError as e:
            raise ConnectError(Code.FAILED_PRECONDITION, f"cannot resize: {e.message}") from None

    @staticmethod
    async def signal(s: Session, signo: int) -> None:
        with contextlib.suppress(E.SandboxError):
            await s.stream.signal(signo)
