"""Daytona's pseudo-terminal sessions (`process.create_pty_session`): an interactive shell on a
terminal of the sandbox's agent (`exec_stream(terminal=...)`), reached over a WebSocket.

```
WS     /process/pty/create-connect?id&cols&rows&cwd   a new session, connected
WS     /process/pty/{id}/connect                      another connection to it
GET    /process/pty, /process/pty/{id}                {sessions: [PtySessionInfo]}, PtySessionInfo
POST   /process/pty/{id}/resize {cols, rows}          PtySessionInfo (the shell sees SIGWINCH)
DELETE /process/pty/{id}                              the session's shell is killed
```

A connection gets `{"type": "control", "status": "connected"}`, then the terminal's bytes as
binary frames; what it sends is typed into the terminal. When the shell exits every connection
gets `{"type": "control", "status": "exited", "exitCode": N}` and is closed (1000, the reason
`{"exitCode": N}`). Environment variables come in the `X-Daytona-Pty-Envs~<base64url JSON>`
subprotocol, as the SDK sends them.

A session's shell is a program of the sandbox's `Holder` (`server/programs.py`, kind
`daytona.pty`): it holds one of the owner's exec slots while it runs, and the sessions go with
the sandbox (deleted, or stopped: a started sandbox has none).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import re
import time
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from sandboxes import errors as E
from sandboxes.server.http.daytona.api import PREFIX
from sandboxes.server.http.endpoint import Refused
from sandboxes.server.http.fields import str_map
from sandboxes.server.http.timestamps import iso
from sandboxes.types import Limits

__all__ = ["KIND", "Ptys"]

EXIT_CONTROL = "X-Daytona-Pty-Exit-Control"
ENVS_PREFIX = "X-Daytona-Pty-Envs~"
KIND = "daytona.pty"  # of the sessions' shells among a sandbox's long-lived programs, and their charge
MAX_PTYS = 32
PTY_LIMITS = Limits(wall_time_s=24 * 3600.0, cpu_time_s=24 * 3600.0, max_output_bytes=1 << 30)
_SHELL = "command -v bash >/dev/null 2>&1 && exec bash -i; exec sh -i"
_ID = re.compile(r"[A-Za-z0-9._-]{1,128}")


class Pty:
    """One session: its shell on a terminal and the connections that watch it."""

    def __init__(
        self, pty_id: str, programs: Any, cwd: str, envs: dict[str, str], rows: int, cols: int
    ) -> None:
        self.id, self.cwd, self.envs, self.rows, self.cols = pty_id, cwd, envs, rows, cols
        self.created_at = time.time()
        self.exit_code: int | None = None
        self.connections: set[WebSocket] = set()
        # The shell holds an exec slot while it runs.
        self.stream = programs.start(
            KIND,
            pty_id,
            ["/bin/sh", "-c", _SHELL],
            charge=KIND,
            cwd=cwd,
            env=envs,
            terminal=(rows, cols),
            limits=PTY_LIMITS,
        )
        self.ended = asyncio.Event()
        self.pump = asyncio.ensure_future(self._pump())

    def json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "active": not self.ended.is_set(),
            "cols": self.cols,
            "rows": self.rows,
            "cwd": self.cwd,
            "envs": dict(self.envs),
            "createdAt": iso(self.created_at),
            "lazyStart": False,
        }

    async def _pump(self) -> None:
        try:
            async for ev in self.stream:
                if ev.kind == "stdout" and ev.data:
                    for ws in list(self.connections):
                        with contextlib.suppress(Exception):
                            await ws.send_bytes(ev.data)
                elif ev.kind == "exit" and ev.result is not None:
                    self.exit_code = ev.result.shell_status
        except E.SandboxError:
            pass
        finally:
            if self.exit_code is None:
                self.exit_code = -1
            self.ended.set()
            exited = {"type": "control", "status": "exited", "exitCode": self.exit_code}
            for ws in list(self.connections):
                with contextlib.suppress(Exception):
                    await ws.send_text(json.dumps(exited))
                    await ws.close(code=1000, reason=json.dumps({"exitCode": self.exit_code}))

    async def serve(self, ws: WebSocket) -> None:
        """One connection: the terminal's output to it, its input to the terminal."""
        self.connections.add(ws)
        try:
            await ws.send_text(json.dumps({"type": "control", "status": "connected"}))
            while not self.ended.is_set():
                msg = await ws.receive()
                if msg["type"] == "websocket.disconnect":
                    return
                data = msg.get("bytes") or (msg.get("text") or "").encode()
                if data:
                    await self.stream.send_stdin(data)
        except (WebSocketDisconnect, RuntimeError, E.SandboxError):
            return
        finally:
            self.connections.discard(ws)

    def kill(self) -> None:
        self.stream.cancel()


class Ptys:
    """The PTY routes; `toolbox` is the toolbox (its sandbox lookup and body reads)."""

    def __init__(self, toolbox: Any) -> None:
        self.toolbox = toolbox

    def of(self, rec: Any) -> dict[str, Pty]:
        """`rec`'s sessions, by id (they go with its sandbox)."""
        ptys: dict[str, Pty] = self.toolbox.core.programs(rec).state(KIND, dict)
        return ptys

    def routes(self) -> list[tuple[str, Any, str]]:
        return [
            ("/process/pty", self.list, "GET"),
            ("/process/pty/{pty_id}", self.get, "GET"),
            ("/process/pty/{pty_id}", self.kill, "DELETE"),
            ("/process/pty/{pty_id}/resize", self.resize, "POST"),
        ]

    def websocket_routes(self) -> list[WebSocketRoute]:
        base = f"{PREFIX}/toolbox/{{sandbox_id}}/process/pty"
        return [
            WebSocketRoute(f"{base}/create-connect", self.create_connect),
            WebSocketRoute(f"{base}/{{pty_id}}/connect", self.connect),
        ]

    def _pty(self, rec: Any, pty_id: str) -> Pty:
        p = self.of(rec).get(pty_id)
        if p is None:
            raise Refused(404, f"PTY session {pty_id} not found")
        return p

    async def list(self, request: Request, rec: Any, sb: Any) -> Response:
        return JSONResponse({"sessions": [p.json() for p in self.of(rec).values()]})

    async def get(self, request: Request, rec: Any, sb: Any) -> Response:
        return JSONResponse(self._pty(rec, request.path_params["pty_id"]).json())

    async def kill(self, request: Request, rec: Any, sb: Any) -> Response:
        p = self.of(rec).pop(request.path_params["pty_id"], None)
        if p is None:
            raise Refused(404, f"PTY session {request.path_params['pty_id']} not found")
        p.kill()
        return JSONResponse({})

    async def resize(self, request: Request, rec: Any, sb: Any) -> Response:
        p = self._pty(rec, request.path_params["pty_id"])
        body = await self.toolbox._body(request)
        rows, cols = body.get("rows"), body.get("cols")
        if not all(isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 1000 for v in (rows, cols)):
            raise Refused(400, "rows and cols must be whole numbers from 1 to 1000")
        await p.stream.resize(rows, cols)
        p.rows, p.cols = rows, cols
        return JSONResponse(p.json())

    async def _accept(self, ws: WebSocket) -> tuple[Any, Any] | None:
        """The sandbox the connection is for, the connection accepted (None: refused)."""
        try:
            rec, sb = await self.toolbox.target(ws)
        except (E.SandboxError, Refused):
            await ws.close(code=1008)  # before the handshake: the upgrade is refused (403)
            return None
        offered = ws.scope.get("subprotocols") or []
        await ws.accept(subprotocol=EXIT_CONTROL if EXIT_CONTROL in offered else None)
        return rec, sb

    async def create_connect(self, ws: WebSocket) -> None:
        accepted = await self._accept(ws)
        if accepted is None:
            return
        rec, sb = accepted
        q = ws.query_params
        try:
            pty_id = q.get("id") or ""
            if not _ID.fullmatch(pty_id):
                raise Refused(400, "id must be 1 to 128 letters, digits, '.', '_' or '-'")
            programs = self.toolbox.core.programs(rec)
            ptys: dict[str, Pty] = programs.state(KIND, dict)
            if pty_id in ptys and not ptys[pty_id].ended.is_set():
                raise Refused(409, f"PTY session {pty_id} already exists")
            if len(ptys) >= MAX_PTYS:
                raise Refused(429, f"a sandbox has at most {MAX_PTYS} PTY sessions")
            rows, cols = int(q.get("rows") or 24), int(q.get("cols") or 80)
            if not (1 <= rows <= 1000 and 1 <= cols <= 1000):
                raise Refused(400, "rows and cols must be from 1 to 1000")
            cwd = self.toolbox._path(sb, q["cwd"], "cwd") if q.get("cwd") else sb.work_dir
            envs = {**sb.env, **_envs(ws.scope.get("subprotocols") or [])}
            ptys[pty_id] = p = Pty(pty_id, programs, cwd, envs, rows, cols)
        except (Refused, E.SandboxError, ValueError) as e:
            message = (
                e.message if isinstance(e, (Refused, E.SandboxError)) else "rows and cols must be numbers"
            )
            with contextlib.suppress(Exception):
                await ws.send_text(json.dumps({"type": "control", "status": "error", "error": message}))
                await ws.close(code=1011, reason=json.dumps({"error": message}))
            return
        await p.serve(ws)

    async def connect(self, ws: WebSocket) -> None:
        accepted = await self._accept(ws)
        if accepted is None:
            return
        rec, _ = accepted
        p = self.of(rec).get(ws.path_params["pty_id"])
        if p is None or p.ended.is_set():
            message = f"PTY session {ws.path_params['pty_id']} not found"
            await ws.send_text(json.dumps({"type": "control", "status": "error", "error": message}))
            await ws.close(code=1011, reason=json.dumps({"error": message}))
            return
        await p.serve(ws)


def _envs(subprotocols: list[str]) -> dict[str, str]:
    for proto in subprotocols:
        if proto.startswith(ENVS_PREFIX):
            raw = proto[len(ENVS_PREFIX) :]
            try:
                envs = json.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
            except (binascii.Error, ValueError):
                raise Refused(400, "the PTY's environment is not base64url JSON") from None
            return str_map(envs, "the PTY's environment")
    return {}
