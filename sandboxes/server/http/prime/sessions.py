"""`command_session.CommandSession` of the Prime gateway (Connect, binary protobuf): how the SDK
runs every command (`execute_command`, `start_background_job`) and live process (`open_process`).

`Start` runs `CommandSpec` (the SDK sends `/bin/bash -c <command>`) as a session of
`http/sessions.py` and streams its start / data / end events, with a keepalive while it is quiet
so a vanished client is noticed. The program's wall limit is the call's `Connect-Timeout-Ms`; at it the program
is killed and the call ends with `deadline_exceeded` (the SDK's `CommandTimeoutError`).

A session named by `session_uuid` (or an older SDK's `tag`) outlives its stream: `Start` again
with the same name, or `Connect`, re-attaches (the start event is announced again, output from
then on is streamed, an exit already seen is replayed for a while), and `SendInput` /
`SendSignal` reach it by name or pid. An unnamed session is killed when its client goes away.
What a command leaves running (`cmd &`) keeps running, as in a container, until the sandbox ends.
"""

from __future__ import annotations

import contextvars
import signal
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from connectrpc.code import Code
from connectrpc.errors import ConnectError

from sandboxes._proto import command_session_pb2 as cs
from sandboxes.server.http.connect import Rpc, service_app
from sandboxes.server.http.sessions import COMMAND_LIMITS, Programs, SandboxSessions

if TYPE_CHECKING:
    from sandboxes.server.http.prime.state import PrimeSandbox
    from sandboxes.server.registry import Record
    from sandboxes.server.surface_core import SurfaceCore

__all__ = ["COMMAND_LIMITS", "SERVICE", "TARGET", "Sessions", "sessions_app"]

SERVICE = "command_session.CommandSession"

# The sandbox the current gateway request is for (set by the gateway after its token check).
TARGET: contextvars.ContextVar[tuple[Record, PrimeSandbox] | ConnectError] = contextvars.ContextVar(
    "sandboxes_prime_target"
)


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


class Sessions:
    """The Connect service: handlers for `sessions_app`. A running session holds one exec slot of
    its key's quota (`ServerCore.exec_slot`) until its program ends; an unnamed one ends with its
    stream."""

    def __init__(self, core: SurfaceCore) -> None:
        self.core = core
        self.programs = Programs(
            cs.CommandSessionEvent, _end_event, core=core, kill_orphans=True, attr="prime_sessions"
        )

    def _target(self) -> tuple[Record, PrimeSandbox, SandboxSessions]:
        target = TARGET.get(None)
        if target is None:
            raise ConnectError(Code.UNAUTHENTICATED, "no sandbox for this request")
        if isinstance(target, ConnectError):
            raise target
        rec, sb = target
        self.core.touch(rec)  # activity: its idle timeout counts from now
        return rec, sb, self.programs.of(rec)

    @staticmethod
    def _argv_env(spec: Any, sb: PrimeSandbox) -> tuple[list[str], dict[str, str], str | None]:
        if not spec.cmd:
            raise ConnectError(Code.INVALID_ARGUMENT, "command.cmd is required")
        if spec.HasField("user") and spec.user not in (sb.user,):
            raise ConnectError(
                Code.INVALID_ARGUMENT,
                f"user {spec.user!r} does not exist in this sandbox: commands run as {sb.user!r}",
            )
        cwd = spec.cwd if spec.HasField("cwd") and spec.cwd else None
        return [spec.cmd, *spec.args], dict(spec.envs), cwd

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
            argv, env, cwd = self._argv_env(req.command, sb)
            s = await self.programs.launch(
                rec,
                req.command,
                argv,
                env,
                cwd,
                stdin=bool(req.stdin),
                timeout_s=self.programs.timeout_s(ctx),
                name=name or None,
            )
        async for msg in self.programs.follow(s, cs.StartResponse, own=existing is None):
            yield msg

    async def connect(self, req: Any, ctx: Any) -> AsyncIterator[Any]:
        _, _, sessions = self._target()
        s = sessions.find(req.session)
        if s is None:
            raise ConnectError(Code.NOT_FOUND, "no such session (it ended, or its retention expired)")
        async for msg in self.programs.follow(s, cs.ConnectResponse, own=False):
            yield msg

    async def list(self, req: Any, ctx: Any) -> Any:
        _, _, sessions = self._target()
        infos = [
            cs.CommandSessionInfo(command=s.spec, pid=s.pid, **({"session_uuid": s.name} if s.name else {}))
            for s in sessions.live
        ]
        return cs.ListResponse(sessions=infos)

    async def send_input(self, req: Any, ctx: Any) -> Any:
        _, _, sessions = self._target()
        s = sessions.running(req.session)
        if req.input.WhichOneof("input") != "stdin":
            raise ConnectError(Code.UNIMPLEMENTED, "only stdin input is supported")
        if s.once(req.input_uuid if req.HasField("input_uuid") else None):
            await self.programs.send_stdin(s, req.input.stdin)
        return cs.SendInputResponse()

    async def send_signal(self, req: Any, ctx: Any) -> Any:
        _, _, sessions = self._target()
        s = sessions.running(req.session)
        if req.signal not in (cs.SIGNAL_SIGTERM, cs.SIGNAL_SIGKILL):
            raise ConnectError(Code.INVALID_ARGUMENT, "signal must be SIGTERM or SIGKILL")
        if s.once(req.signal_uuid if req.HasField("signal_uuid") else None):
            await self.programs.signal(s, int(req.signal))
        return cs.SendSignalResponse()

    async def update(self, req: Any, ctx: Any) -> Any:
        raise ConnectError(Code.UNIMPLEMENTED, "pseudo-terminals are not supported by this server")


def sessions_app(service: Sessions) -> Any:
    """The Connect ASGI app of `service` (paths `/command_session.CommandSession/<Method>`)."""
    return service_app(
        SERVICE,
        [
            Rpc("Start", "server_stream", cs.StartRequest, cs.StartResponse, service.start),
            Rpc("Connect", "server_stream", cs.ConnectRequest, cs.ConnectResponse, service.connect, True),
            Rpc("List", "unary", cs.ListRequest, cs.ListResponse, service.list, True),
            Rpc("SendInput", "unary", cs.SendInputRequest, cs.SendInputResponse, service.send_input),
            Rpc("SendSignal", "unary", cs.SendSignalRequest, cs.SendSignalResponse, service.send_signal),
            Rpc("Update", "unary", cs.UpdateRequest, cs.UpdateResponse, service.update),
        ],
    )
