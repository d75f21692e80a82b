"""execd's PTY sessions (the wire protocol NeMo-Gym's OpenSandbox provider speaks; the released
SDKs have no PTY API): a program on a terminal, or on pipes, reached over a WebSocket.

```
POST   /pty  {cwd?, command?}                  200 {session_id} (the program starts at the first attach)
GET    /pty/{id}                                200 {session_id, running, exit_code?}; 404 CONTEXT_NOT_FOUND
DELETE /pty/{id}                                200 (its program is killed)
WS     /pty/{id}/ws?pty=0&takeover=1&since=N    the session (pty=0: pipes, else a terminal)
```

A connection gets `{"type": "connected", "mode": "pty" | "pipe"}`, then with `since` the output
kept from that byte offset as one replay frame (`0x03`, a big-endian u64 offset, the bytes),
then the program's output as binary frames (`0x01` stdout, `0x02` stderr; a terminal's is all
stdout). It sends `0x00` + bytes as input, `{"type": "resize", rows, cols}` and
`{"type": "signal", "signal": "SIGINT" | ...}`. When the program ends it gets
`{"type": "exit", "exit_code": N}` and is closed. One connection at a time: another is closed
with 1008 unless it takes the session over (`takeover=1`), which closes the first with 4001. The
last MiB of output is kept for replays. No command: the sandbox's shell (bash, else sh).

A session's program is one of the sandbox's long-lived programs (`server/programs.py`, kind
`opensandbox.pty`): it holds one of the owner's exec slots while it runs, and the sessions go
with the sandbox.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import uuid
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.websockets import WebSocket, WebSocketDisconnect

from sandboxes import errors as E
from sandboxes.server.http.endpoint import Refused
from sandboxes.types import Limits

if TYPE_CHECKING:
    from sandboxes.server.http.opensandbox.execd import Execd, Handler
    from sandboxes.server.http.opensandbox.state import OpenSandbox
    from sandboxes.server.registry import Record

__all__ = ["KIND", "Ptys"]

KIND = "opensandbox.pty"  # of the sessions' programs among a sandbox's, and their charge
MAX_PTYS = 32
KEPT_BYTES = 1 << 20
PTY_LIMITS = Limits(wall_time_s=24 * 3600.0, cpu_time_s=24 * 3600.0, max_output_bytes=1 << 30)
SHELL = 'exec "$(command -v bash || echo sh)"'
STDIN, STDOUT, STDERR, REPLAY = 0, 1, 2, 3
TAKEN_OVER, POLICY_VIOLATION = 4001, 1008
SIGNALS = {name: int(getattr(signal, name)) for name in ("SIGINT", "SIGTERM", "SIGKILL", "SIGQUIT", "SIGHUP")}
NOT_FOUND = "CONTEXT_NOT_FOUND"


class Pty:
    """One session: its program (started at the first attach), its kept output, its connection."""

    def __init__(self, session_id: str, cwd: str, command: str, env: dict[str, str]) -> None:
        self.id, self.cwd, self.command, self.env = session_id, cwd, command, env
        self.stream: Any = None
        self.mode = "pty"
        self.kept = bytearray()  # the last KEPT_BYTES of output, which starts at byte `start`
        self.start = 0
        self.exit_code: int | None = None
        self.ended = asyncio.Event()
        self.ws: WebSocket | None = None
        # Output is kept and sent under it, so a connection's replay and its live frames neither
        # miss nor repeat a byte.
        self.lock = asyncio.Lock()

    def json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "session_id": self.id,
            "running": self.stream is not None and not self.ended.is_set(),
        }
        if self.exit_code is not None:
            out["exit_code"] = self.exit_code
        return out

    def launch(self, programs: Any, terminal: bool) -> None:
        self.mode = "pty" if terminal else "pipe"
        self.stream = programs.start(
            KIND,
            self.id,
            ["/bin/sh", "-c", self.command],
            charge=KIND,
            cwd=self.cwd,
            env=self.env,
            terminal=(24, 80) if terminal else None,
            limits=PTY_LIMITS,
        )
        asyncio.ensure_future(self._pump())

    async def _pump(self) -> None:
        try:
            async for ev in self.stream:
                if ev.kind in ("stdout", "stderr") and ev.data:
                    async with self.lock:
                        self.kept += ev.data
                        if len(self.kept) > KEPT_BYTES:
                            drop = len(self.kept) - KEPT_BYTES
                            del self.kept[:drop]
                            self.start += drop
                        await self._send(bytes([STDOUT if ev.kind == "stdout" else STDERR]) + ev.data)
                elif ev.kind == "exit" and ev.result is not None:
                    self.exit_code = ev.result.shell_status
        except E.SandboxError:
            pass
        finally:
            if self.exit_code is None:
                self.exit_code = -1
            async with self.lock:
                self.ended.set()
                if self.ws is not None:
                    await _end(self.ws, self.exit_code)

    async def _send(self, frame: bytes) -> None:
        ws = self.ws
        if ws is not None:
            with contextlib.suppress(Exception):
                await ws.send_bytes(frame)

    async def serve(self, ws: WebSocket, since: int | None, programs: Any, terminal: bool) -> None:
        """One connection: output kept since `since` and what comes, its input to the program
        (started now if this is the session's first connection, on a terminal or pipes)."""
        async with self.lock:
            mode = self.mode if self.stream is not None else ("pty" if terminal else "pipe")
            await ws.send_text(json.dumps({"type": "connected", "mode": mode, "session_id": self.id}))
            if since is not None:
                offset = max(since, self.start)
                tail = bytes(self.kept[offset - self.start :])
                if tail:
                    await ws.send_bytes(bytes([REPLAY]) + offset.to_bytes(8, "big") + tail)
            if self.ended.is_set():
                await _end(ws, self.exit_code)
                return
            self.ws = ws
        try:
            if self.stream is None:
                self.launch(programs, terminal)
            while not self.ended.is_set():
                msg = await ws.receive()
                if msg["type"] == "websocket.disconnect":
                    return
                if msg.get("bytes"):
                    data = msg["bytes"]
                    if data[0] == STDIN and len(data) > 1:
                        await self.stream.send_stdin(data[1:])
                elif msg.get("text"):
                    await self._control(json.loads(msg["text"]))
        except E.SandboxError as e:
            with contextlib.suppress(Exception):
                await ws.send_text(json.dumps({"type": "error", "code": "RUNTIME_ERROR", "error": e.message}))
                await ws.close(code=1011)
        except (WebSocketDisconnect, RuntimeError, ValueError):
            return
        finally:
            if self.ws is ws:
                self.ws = None

    async def _control(self, frame: Any) -> None:
        if not isinstance(frame, dict):
            return
        if frame.get("type") == "resize" and self.mode == "pty":
            rows, cols = frame.get("rows"), frame.get("cols")
            if all(isinstance(v, int) and 1 <= v <= 1000 for v in (rows, cols)):
                await self.stream.resize(rows, cols)
        elif frame.get("type") == "signal" and frame.get("signal") in SIGNALS:
            await self.stream.signal(SIGNALS[frame["signal"]])

    def kill(self) -> None:
        if self.stream is not None:
            self.stream.cancel()


async def _end(ws: WebSocket, exit_code: int | None) -> None:
    with contextlib.suppress(Exception):
        await ws.send_text(json.dumps({"type": "exit", "exit_code": exit_code}))
        await ws.close(code=1000)


class Ptys:
    """The PTY routes; `execd` is the execd service (its sandbox lookup and body reads)."""

    def __init__(self, execd: Execd) -> None:
        self.execd = execd
        self.core = execd.core

    def of(self, rec: Record) -> dict[str, Pty]:
        """`rec`'s sessions, by id (they go with its sandbox)."""
        ptys: dict[str, Pty] = self.core.programs(rec).state(KIND, dict)
        return ptys

    def routes(self) -> list[tuple[str, Handler, str]]:
        return [
            ("/pty", self.create, "POST"),
            ("/pty/{session_id}", self.get, "GET"),
            ("/pty/{session_id}", self.delete, "DELETE"),
        ]

    def _pty(self, rec: Record, session_id: str) -> Pty:
        p = self.of(rec).get(session_id)
        if p is None:
            raise Refused(404, f"PTY session {session_id} not found", fields={"code": NOT_FOUND})
        return p

    async def create(self, request: Request, rec: Record, sb: OpenSandbox) -> Response:
        body = await self.execd.body(request) if await request.body() else {}
        if not isinstance(body, dict):
            raise Refused(400, "the body must be a JSON object")
        command, cwd = body.get("command") or SHELL, body.get("cwd")
        if not isinstance(command, str) or (cwd is not None and not isinstance(cwd, str)):
            raise Refused(400, "command and cwd must be strings")
        ptys = self.of(rec)
        for sid in [sid for sid, p in ptys.items() if p.ended.is_set()]:
            del ptys[sid]  # the ended ones make room
        if len(ptys) >= MAX_PTYS:
            raise Refused(429, f"a sandbox has at most {MAX_PTYS} PTY sessions")
        p = Pty(uuid.uuid4().hex, sb.resolve(cwd, "cwd") if cwd else sb.work_dir, command, dict(sb.env))
        ptys[p.id] = p
        return JSONResponse({"session_id": p.id})

    async def get(self, request: Request, rec: Record, sb: OpenSandbox) -> Response:
        return JSONResponse(self._pty(rec, request.path_params["session_id"]).json())

    async def delete(self, request: Request, rec: Record, sb: OpenSandbox) -> Response:
        p = self.of(rec).pop(request.path_params["session_id"], None)
        if p is None:
            raise Refused(
                404, f"PTY session {request.path_params['session_id']} not found", fields={"code": NOT_FOUND}
            )
        p.kill()
        return JSONResponse({})

    async def connect(self, ws: WebSocket, rec: Record) -> None:
        """A connection to a session, its sandbox found and the caller's right to it checked."""
        p = self.of(rec).get(ws.path_params["session_id"])
        if p is None:
            await ws.close(code=1008)  # before the handshake: refused
            return
        q = ws.query_params
        try:
            since = int(q["since"]) if q.get("since") else None
        except ValueError:
            since = None
        await ws.accept()
        held = p.ws
        if held is not None:
            if q.get("takeover") not in ("1", "true"):
                await ws.close(code=POLICY_VIOLATION)
                return
            p.ws = None
            with contextlib.suppress(Exception):
                await held.close(code=TAKEN_OVER)
        await p.serve(ws, since, self.core.programs(rec), terminal=q.get("pty") != "0")
