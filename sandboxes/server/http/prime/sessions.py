"""`command_session.CommandSession` of the Prime gateway (Connect, binary protobuf): how the SDK
runs every command (`execute_command`, `start_background_job`) and live process (`open_process`).

`Start` runs `CommandSpec` (the SDK sends `/bin/bash -c <command>`) through the agent's exec
stream and streams start / data / end events, with a keepalive every `KEEPALIVE_S` so a vanished
client is noticed. The program's wall limit is the call's `Connect-Timeout-Ms`; at it the program
is killed and the call ends with `deadline_exceeded` (the SDK's `CommandTimeoutError`).

A session named by `session_uuid` (or an older SDK's `tag`) outlives its stream: `Start` again
with the same name, or `Connect`, re-attaches (the start event is announced again, output from
then on is streamed, an exit already seen is replayed for `RETAIN_S`), and `SendInput` /
`SendSignal` reach it by name or pid. An unnamed session is killed when its client goes away.
What a command leaves running (`cmd &`) keeps running, as in a container, until the sandbox ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import signal
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from connectrpc.code import Code
from connectrpc.compat import google_protobuf_codecs
from connectrpc.errors import ConnectError
from connectrpc.method import IdempotencyLevel, MethodInfo
from connectrpc.server import ConnectASGIApplication, Endpoint

from sandboxes import errors as E
from sandboxes._proto import command_session_pb2 as cs
from sandboxes.types import Limits

__all__ = ["SERVICE", "TARGET", "Sessions", "sessions_app"]

log = logging.getLogger("sandboxes.server.prime")

SERVICE = "command_session.CommandSession"
KEEPALIVE_S = 10.0
RETAIN_S = 300.0
# Without a Connect-Timeout-Ms a command may run this long (the SDK always sends one).
DEFAULT_TIMEOUT_S = 24 * 3600.0
MAX_SESSIONS_PER_SANDBOX = 1024
# A command is bounded by its deadline (wall time), not by CPU time: what it leaves running (a
# background job) inherits its CPU rlimit, so that one is as high as the longest deadline.
COMMAND_LIMITS = Limits(cpu_time_s=DEFAULT_TIMEOUT_S)
_SEEN_KEYS = 4096

# The sandbox the current gateway request is for (set by the gateway after its token check).
TARGET: contextvars.ContextVar[Any] = contextvars.ContextVar("sandboxes_prime_target")


@dataclass(eq=False)
class Session:
    """One program and whoever listens to it."""

    stream: Any  # sandboxes.ExecStream
    name: str | None
    spec: Any  # cs.CommandSpec
    pid: int = 0
    end: Any = None  # cs.CommandSessionEvent.EndEvent once exited
    ended_at: float | None = None
    listeners: set[asyncio.Queue] = field(default_factory=set)
    seen_keys: dict[str, None] = field(default_factory=dict)
    pump: asyncio.Task | None = None
    slot: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)  # the key's exec quota

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


def _end_event(result: Any) -> Any:
    if result is None:
        return cs.CommandSessionEvent.EndEvent(
            exit_code=-1, exited=False, status="lost", error="no exit status"
        )
    if result.signal:
        try:
            name = signal.Signals(result.signal).name
        except ValueError:
            name = str(result.signal)
        # As a shell reports it (`$?`): 128 + the signal.
        return cs.CommandSessionEvent.EndEvent(
            exit_code=128 + result.signal, exited=False, status=f"signal: {name}"
        )
    return cs.CommandSessionEvent.EndEvent(
        exit_code=result.exit_code, exited=True, status=f"exit status {result.exit_code}"
    )


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
        which = selector.WhichOneof("selector")
        if which == "pid":
            return self.by_pid.get(selector.pid)
        if which in ("session_uuid", "tag"):
            return self.by_name.get(getattr(selector, which))
        return None

    def close(self) -> None:
        for s in list(self.live):
            s.stream.cancel()
            if s.pump is not None:
                s.pump.cancel()
        self.live.clear()


class Sessions:
    """The Connect service: handlers for `sessions_app`. A running session holds one exec slot of
    its key's quota (`quotas`) until its program ends."""

    def __init__(self, quotas: Any = None) -> None:
        self.quotas = quotas

    # -- helpers -----------------------------------------------------------------------------

    @staticmethod
    def _target() -> tuple[Any, Any, SandboxSessions]:
        target = TARGET.get(None)
        if target is None:
            raise ConnectError(Code.UNAUTHENTICATED, "no sandbox for this request")
        if isinstance(target, ConnectError):
            raise target
        rec, sb = target
        sessions = rec.attrs.setdefault("prime_sessions", SandboxSessions())
        sb.touch()
        return rec, sb, sessions

    @staticmethod
    def _argv_env(spec: Any, sb: Any) -> tuple[list[str], dict[str, str], str | None]:
        if not spec.cmd:
            raise ConnectError(Code.INVALID_ARGUMENT, "command.cmd is required")
        if spec.HasField("user") and spec.user not in (sb.user,):
            raise ConnectError(
                Code.INVALID_ARGUMENT,
                f"user {spec.user!r} does not exist in this sandbox: commands run as {sb.user!r}",
            )
        cwd = spec.cwd if spec.HasField("cwd") and spec.cwd else None
        return [spec.cmd, *spec.args], dict(spec.envs), cwd

    async def _launch(
        self, rec: Any, sb: Any, sessions: SandboxSessions, req: Any, timeout_s: float, name: str | None
    ) -> Session:
        argv, env, cwd = self._argv_env(req.command, sb)
        if len(sessions.live) >= MAX_SESSIONS_PER_SANDBOX:
            raise ConnectError(
                Code.RESOURCE_EXHAUSTED, f"at most {MAX_SESSIONS_PER_SANDBOX} running sessions"
            )
        slot = contextlib.ExitStack()
        try:
            if self.quotas is not None:
                slot.enter_context(self.quotas.exec_slot(rec.owner))
        except E.QuotaExceeded as e:
            raise ConnectError(Code.RESOURCE_EXHAUSTED, e.message) from None
        try:
            stream = rec.sandbox.exec_stream(
                argv,
                env=env or None,
                cwd=cwd,
                timeout=timeout_s,
                stdin=None if req.stdin else b"",
                limits=COMMAND_LIMITS,
                keep_descendants=True,
            )
            first = await stream.__anext__()
        except BaseException as e:
            slot.close()
            if isinstance(e, E.InvalidRequest):
                raise ConnectError(Code.INVALID_ARGUMENT, e.message) from None
            if isinstance(e, E.NotFound):
                raise ConnectError(Code.NOT_FOUND, e.message) from None
            if isinstance(e, E.SandboxError):
                raise ConnectError(Code.UNAVAILABLE, f"{e.kind.value}: {e.message}") from None
            raise
        s = Session(stream=stream, name=name, spec=req.command, slot=slot)
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
                        data = cs.CommandSessionEvent.DataEvent(**{ev.kind: ev.data})
                        msg = cs.CommandSessionEvent(data=data)
                        for q in list(s.listeners):
                            q.put_nowait(msg)
                try:
                    events = [await s.stream.__anext__()]
                except StopAsyncIteration:
                    break
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - the sandbox went away mid-stream
            log.info("session %s ended without an exit: %s", s.name or s.pid, e)
        finally:
            s.slot.close()
            s.end = _end_event(result)
            s.ended_at = time.monotonic()
            sessions.live.discard(s)
            if s.name is None and sessions.by_pid.get(s.pid) is s:
                del sessions.by_pid[s.pid]  # only named sessions are kept after their end
            for q in list(s.listeners):
                q.put_nowait(cs.CommandSessionEvent(end=s.end))

    async def _follow(self, s: Session, response: type, *, own: bool) -> AsyncIterator[Any]:
        """Events of `s` for one stream: start, output from now on, the end. `own`: the stream
        that started an unnamed session, whose end kills it."""
        q: asyncio.Queue = asyncio.Queue()
        ended = s.end is not None
        if not ended:
            # Listening before the first yield (no await in between since the pump was started):
            # no output of the program can pass before this stream hears it.
            s.listeners.add(q)
        finished = False
        try:
            yield response(event=cs.CommandSessionEvent(start=cs.CommandSessionEvent.StartEvent(pid=s.pid)))
            if ended:
                finished = True
                yield response(event=cs.CommandSessionEvent(end=s.end))
                return
            while True:
                try:
                    msg = await asyncio.wait_for(q.get(), KEEPALIVE_S)
                except TimeoutError:
                    yield response(event=cs.CommandSessionEvent(keepalive=cs.CommandSessionEvent.KeepAlive()))
                    continue
                if msg.WhichOneof("event") == "end":
                    finished = True
                    if _timed_out(s):
                        raise ConnectError(
                            Code.DEADLINE_EXCEEDED, "the command ran past its deadline and was killed"
                        )
                    yield response(event=msg)
                    return
                yield response(event=msg)
        finally:
            s.listeners.discard(q)
            if own and not finished and s.name is None:
                s.stream.cancel()

    # -- RPCs --------------------------------------------------------------------------------

    async def start(self, req: Any, ctx: Any) -> AsyncIterator[Any]:
        rec, sb, sessions = self._target()
        if req.HasField("pty"):
            raise ConnectError(Code.UNIMPLEMENTED, "pseudo-terminals are not supported by this server")
        name = (req.session_uuid if req.HasField("session_uuid") else "") or (
            req.tag if req.HasField("tag") else ""
        )
        existing = sessions.by_name.get(name) if name else None
        if existing is not None:
            if existing.spec != req.command:
                raise ConnectError(
                    Code.FAILED_PRECONDITION, "session_uuid names a session with another command"
                )
            s = existing
        else:
            timeout_ms = ctx.timeout_ms
            timeout_s = timeout_ms / 1000.0 if timeout_ms else DEFAULT_TIMEOUT_S
            s = await self._launch(rec, sb, sessions, req, timeout_s, name or None)
        async for msg in self._follow(s, cs.StartResponse, own=existing is None):
            yield msg

    async def connect(self, req: Any, ctx: Any) -> AsyncIterator[Any]:
        _, _, sessions = self._target()
        s = sessions.find(req.session)
        if s is None:
            raise ConnectError(Code.NOT_FOUND, "no such session (it ended, or its retention expired)")
        async for msg in self._follow(s, cs.ConnectResponse, own=False):
            yield msg

    async def list(self, req: Any, ctx: Any) -> Any:
        _, _, sessions = self._target()
        infos = [
            cs.CommandSessionInfo(command=s.spec, pid=s.pid, **({"session_uuid": s.name} if s.name else {}))
            for s in sessions.live
        ]
        return cs.ListResponse(sessions=infos)

    def _running(self, sessions: SandboxSessions, selector: Any) -> Session:
        s = sessions.find(selector)
        if s is None:
            raise ConnectError(Code.NOT_FOUND, "no such session")
        if s.end is not None:
            raise ConnectError(Code.FAILED_PRECONDITION, "the session has exited")
        return s

    async def send_input(self, req: Any, ctx: Any) -> Any:
        _, _, sessions = self._target()
        s = self._running(sessions, req.session)
        if req.input.WhichOneof("input") != "stdin":
            raise ConnectError(Code.UNIMPLEMENTED, "only stdin input is supported")
        if s.once(req.input_uuid if req.HasField("input_uuid") else None):
            try:
                await s.stream.send_stdin(req.input.stdin)
            except E.SandboxError as e:
                raise ConnectError(Code.FAILED_PRECONDITION, f"stdin is closed: {e.message}") from None
        return cs.SendInputResponse()

    async def send_signal(self, req: Any, ctx: Any) -> Any:
        _, _, sessions = self._target()
        s = self._running(sessions, req.session)
        if req.signal not in (cs.SIGNAL_SIGTERM, cs.SIGNAL_SIGKILL):
            raise ConnectError(Code.INVALID_ARGUMENT, "signal must be SIGTERM or SIGKILL")
        if s.once(req.signal_uuid if req.HasField("signal_uuid") else None):
            with contextlib.suppress(E.SandboxError):
                await s.stream.signal(int(req.signal))
        return cs.SendSignalResponse()

    async def update(self, req: Any, ctx: Any) -> Any:
        raise ConnectError(Code.UNIMPLEMENTED, "pseudo-terminals are not supported by this server")


def _timed_out(s: Session) -> bool:
    result = s.stream.result
    return bool(result is not None and result.timed_out)


def _method(
    name: str, req: type, resp: type, level: IdempotencyLevel = IdempotencyLevel.UNKNOWN
) -> MethodInfo:
    return MethodInfo(name=name, service_name=SERVICE, input=req, output=resp, idempotency_level=level)


class _App(ConnectASGIApplication):
    @property
    def path(self) -> str:
        return f"/{SERVICE}"


def sessions_app(service: Sessions, *, read_max_bytes: int = 64 << 20) -> ConnectASGIApplication:
    """The Connect ASGI app of `service` (paths `/command_session.CommandSession/<Method>`)."""
    nse = IdempotencyLevel.NO_SIDE_EFFECTS

    def endpoints(svc: Sessions) -> dict[str, Any]:
        p = f"/{SERVICE}/"
        return {
            p + "Start": Endpoint.server_stream(
                _method("Start", cs.StartRequest, cs.StartResponse), svc.start
            ),
            p + "Connect": Endpoint.server_stream(
                _method("Connect", cs.ConnectRequest, cs.ConnectResponse, nse), svc.connect
            ),
            p + "List": Endpoint.unary(_method("List", cs.ListRequest, cs.ListResponse, nse), svc.list),
            p + "SendInput": Endpoint.unary(
                _method("SendInput", cs.SendInputRequest, cs.SendInputResponse), svc.send_input
            ),
            p + "SendSignal": Endpoint.unary(
                _method("SendSignal", cs.SendSignalRequest, cs.SendSignalResponse), svc.send_signal
            ),
            p + "Update": Endpoint.unary(_method("Update", cs.UpdateRequest, cs.UpdateResponse), svc.update),
        }

    return _App(
        service=service, endpoints=endpoints, codecs=google_protobuf_codecs(), read_max_bytes=read_max_bytes
    )
