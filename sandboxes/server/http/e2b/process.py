"""`process.Process` of the E2B in-sandbox daemon (Connect, JSON): `commands.run`, background
commands, `commands.connect / list / kill / send_stdin / close_stdin`.

`Start` runs `ProcessConfig` (the SDK sends `/bin/bash -l -c <command>`) as a session of
`http/sessions.py`: start / data / end events, keepalives while quiet. The program's wall limit
is the call's `Connect-Timeout-Ms` (the SDK sends 60 s unless `timeout=0`); at it the program is
killed and the call ends with `deadline_exceeded` (the SDK's `TimeoutException`). A program
outlives its stream (`handle.disconnect()`, a background command whose client went away), as
under the platform's daemon, until it exits, is killed or the sandbox ends. Who runs it comes in
`Authorization: Basic <user>:`, a user of the sandbox to run as (`request_user`).

`Start` with `pty` (the SDK's `pty.create`) runs the program on a pseudo-terminal of that size:
its output comes as `pty` data (raw terminal bytes, both streams), `SendInput` / `StreamInput`
with `pty` input types into it (`\x03` is Ctrl-C), `Update` with `pty.size` resizes it (the
program sees SIGWINCH). Pty input or a resize of a process without a terminal is refused
(`invalid_argument`), as stdin input of one with a terminal is accepted and typed.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextvars
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from connectrpc.code import Code
from connectrpc.errors import ConnectError

from sandboxes._proto import envd_process_pb2 as pp
from sandboxes.server.http.connect import Rpc, service_app
from sandboxes.server.http.sessions import STREAMED_LIMITS, Programs, SandboxSessions

if TYPE_CHECKING:
    from sandboxes.server.http.e2b.state import E2bSandbox
    from sandboxes.server.registry import Record
    from sandboxes.server.surface_core import SurfaceCore

__all__ = ["SERVICE", "TARGET", "Process", "connect_app", "request_user"]

SERVICE = "process.Process"

# (record, E2bSandbox) the current in-sandbox request is for (set after its token check).
TARGET: contextvars.ContextVar[tuple[Record, E2bSandbox]] = contextvars.ContextVar("sandboxes_e2b_target")

# How the platform's daemon (Go's os.ProcessState) words a death by signal.
_SIGNAL_WORDS = {
    1: "hangup",
    2: "interrupt",
    3: "quit",
    4: "illegal instruction",
    6: "aborted",
    7: "bus error",
    8: "floating point exception",
    9: "killed",
    11: "segmentation fault",
    13: "broken pipe",
    14: "alarm clock",
    15: "terminated",
}


def _end_event(result: Any) -> Any:
    End = pp.ProcessEvent.EndEvent
    if result is None:
        return End(exit_code=-1, exited=False, status="lost", error="no exit status")
    if result.signal:
        word = _SIGNAL_WORDS.get(result.signal, f"signal {result.signal}")
        return End(exit_code=-1, exited=False, status=f"signal: {word}")
    return End(exit_code=result.exit_code, exited=True, status=f"exit status {result.exit_code}")


def target() -> tuple[Record, E2bSandbox]:
    value = TARGET.get(None)
    if value is None:
        raise ConnectError(Code.UNAUTHENTICATED, "no sandbox for this request")
    return value


def request_user(ctx: Any, sb: E2bSandbox) -> str | None:
    """The user a call's `Authorization: Basic <user>:` names, None for the sandbox's own (or
    none named). Whether the sandbox has that user is the agent's to say: one whose programs run
    as root has every user of its `/etc/passwd`, any other only its own."""
    header = ctx.request_headers.get("authorization")
    if not header:
        return None
    scheme, _, value = header.partition(" ")
    try:
        user = base64.b64decode(value.strip(), validate=True).decode().partition(":")[0]
    except (binascii.Error, UnicodeDecodeError):
        raise ConnectError(Code.INVALID_ARGUMENT, "malformed Authorization: expected Basic <user>:") from None
    if scheme.lower() != "basic":
        raise ConnectError(Code.INVALID_ARGUMENT, "malformed Authorization: expected Basic <user>:")
    return sb.user_of(user)


class Process:
    """The Connect service: handlers for `connect_app`."""

    def __init__(self, core: SurfaceCore) -> None:
        self.programs = Programs(
            pp.ProcessEvent,
            _end_event,
            core=core,
            kill_orphans=False,
            attr="e2b_processes",
            limits=STREAMED_LIMITS,
        )

    def _sessions(self) -> tuple[Record, E2bSandbox, SandboxSessions]:
        rec, sb = target()
        return rec, sb, self.programs.of(rec)

    async def start(self, req: Any, ctx: Any) -> AsyncIterator[Any]:
        rec, sb, sessions = self._sessions()
        user = request_user(ctx, sb)
        terminal = (req.pty.size.rows, req.pty.size.cols) if req.HasField("pty") else None
        spec = req.process
        if not spec.cmd:
            raise ConnectError(Code.INVALID_ARGUMENT, "process.cmd is required")
        name = req.tag if req.HasField("tag") and req.tag else None
        if name is not None and name in sessions.by_name and sessions.by_name[name].end is None:
            raise ConnectError(Code.ALREADY_EXISTS, f"a process tagged {name!r} is running")
        cwd = spec.cwd if spec.HasField("cwd") and spec.cwd else sb.work_dir
        s = await self.programs.launch(
            rec,
            spec,
            [spec.cmd, *spec.args],
            dict(spec.envs),
            cwd,
            # Without the field (older clients) stdin is open, as on the platform.
            stdin=req.stdin if req.HasField("stdin") else True,
            timeout_s=self.programs.timeout_s(ctx),
            name=name,
            terminal=terminal,
            user=user,
        )
        async for msg in self.programs.follow(s, pp.StartResponse, own=True):
            yield msg

    async def connect(self, req: Any, ctx: Any) -> AsyncIterator[Any]:
        _, _, sessions = self._sessions()
        s = sessions.find(req.process)
        if s is None or (s.end is not None and s.name is None):
            raise ConnectError(Code.NOT_FOUND, "no such process")
        async for msg in self.programs.follow(s, pp.ConnectResponse, own=False):
            yield msg

    async def list(self, req: Any, ctx: Any) -> Any:
        _, _, sessions = self._sessions()
        return pp.ListResponse(
            processes=[
                pp.ProcessInfo(config=s.spec, pid=s.pid, **({"tag": s.name} if s.name else {}))
                for s in sessions.live
            ]
        )

    async def send_input(self, req: Any, ctx: Any) -> Any:
        _, _, sessions = self._sessions()
        s = sessions.running(req.process)
        await self.programs.send_stdin(s, _input_of(s, req.input))
        return pp.SendInputResponse()

    async def stream_input(self, reqs: AsyncIterator[Any], ctx: Any) -> Any:
        _, _, sessions = self._sessions()
        s = None
        async for req in reqs:
            kind = req.WhichOneof("event")
            if kind == "start":
                s = sessions.running(req.start.process)
            elif kind == "data":
                if s is None:
                    raise ConnectError(Code.INVALID_ARGUMENT, "the first message must be `start`")
                await self.programs.send_stdin(s, _input_of(s, req.data.input))
        return pp.StreamInputResponse()

    async def close_stdin(self, req: Any, ctx: Any) -> Any:
        _, _, sessions = self._sessions()
        s = sessions.running(req.process)
        await s.stream.close_stdin()
        return pp.CloseStdinResponse()

    async def send_signal(self, req: Any, ctx: Any) -> Any:
        _, _, sessions = self._sessions()
        s = sessions.running(req.process)
        if req.signal not in (pp.SIGNAL_SIGTERM, pp.SIGNAL_SIGKILL):
            raise ConnectError(Code.INVALID_ARGUMENT, "signal must be SIGTERM or SIGKILL")
        await self.programs.signal(s, int(req.signal))
        if req.signal == pp.SIGNAL_SIGKILL and s.pump is not None:
            # Answered once the program is gone, as the platform's kill is.
            await asyncio.wait({s.pump}, timeout=5.0)
        return pp.SendSignalResponse()

    async def update(self, req: Any, ctx: Any) -> Any:
        _, _, sessions = self._sessions()
        s = sessions.running(req.process)
        if req.HasField("pty"):
            if not s.terminal:
                raise ConnectError(Code.INVALID_ARGUMENT, "the process has no pseudo-terminal to resize")
            await self.programs.resize(s, req.pty.size.rows, req.pty.size.cols)
        return pp.UpdateResponse()


def _input_of(s: Any, msg: Any) -> bytes:
    """The bytes of a `ProcessInput`: `stdin` for any process, `pty` for one with a terminal."""
    kind = msg.WhichOneof("input")
    if kind == "pty":
        if not s.terminal:
            raise ConnectError(Code.INVALID_ARGUMENT, "the process has no pseudo-terminal")
        return bytes(msg.pty)
    if kind == "stdin":
        return bytes(msg.stdin)
    raise ConnectError(Code.INVALID_ARGUMENT, "input carries neither stdin nor pty")


def connect_app(service: Process) -> Any:
    """The Connect ASGI app of `service` (paths `/process.Process/<Method>`)."""
    return service_app(
        SERVICE,
        [
            Rpc("Start", "server_stream", pp.StartRequest, pp.StartResponse, service.start),
            Rpc("Connect", "server_stream", pp.ConnectRequest, pp.ConnectResponse, service.connect),
            Rpc("List", "unary", pp.ListRequest, pp.ListResponse, service.list),
            Rpc("SendInput", "unary", pp.SendInputRequest, pp.SendInputResponse, service.send_input),
            Rpc(
                "StreamInput",
                "client_stream",
                pp.StreamInputRequest,
                pp.StreamInputResponse,
                service.stream_input,
            ),
            Rpc("CloseStdin", "unary", pp.CloseStdinRequest, pp.CloseStdinResponse, service.close_stdin),
            Rpc("SendSignal", "unary", pp.SendSignalRequest, pp.SendSignalResponse, service.send_signal),
            Rpc("Update", "unary", pp.UpdateRequest, pp.UpdateResponse, service.update),
        ],
    )
