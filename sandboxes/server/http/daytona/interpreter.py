"""Daytona's code interpreter (`sandbox.code_interpreter`), on the server's kernels
(`kernels.py`): a context's Python state is kept across runs.

```
WS     /process/interpreter/execute      -> {code, contextId?, envs?, timeout?}
                                         <- {type: stdout|stderr, text} / {type: error, name, value,
                                            traceback} ..., closed 1000 (4008 past `timeout`)
POST   /process/interpreter/context      {cwd?, language?} -> {id, cwd, language, active, createdAt}
GET    /process/interpreter/context      {contexts: [...]} (those made here; not the default one)
DELETE /process/interpreter/context/{id} {}
```

A run without `contextId` uses the sandbox's default context. A run past its `timeout` is
interrupted (the context keeps its state) and the socket closed with 4008, the daemon's code for
it, which the SDK raises as `DaytonaTimeoutError`.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from sandboxes import errors as E
from sandboxes.server.http.daytona.api import PREFIX
from sandboxes.server.http.endpoint import Refused
from sandboxes.server.http.fields import str_map
from sandboxes.server.http.kernels import Kernels, language_of
from sandboxes.server.http.timestamps import iso

if TYPE_CHECKING:
    from sandboxes.server.http.daytona.state import DaytonaSandbox
    from sandboxes.server.http.daytona.toolbox import Toolbox
    from sandboxes.server.registry import Record

__all__ = ["CodeInterpreter"]

TIMEOUT_CLOSE = 4008  # the daemon's close code of a run past its timeout
MAX_CODE_BYTES = 16 << 20


class CodeInterpreter:
    """The interpreter's handlers; `toolbox` is the toolbox (its sandbox lookup and envelope)."""

    def __init__(self, toolbox: Toolbox) -> None:
        self.toolbox = toolbox
        self.kernels = Kernels(toolbox.core)

    def routes(self) -> list[tuple[str, Any, str]]:
        return [
            ("/process/interpreter/context", self.create_context, "POST"),
            ("/process/interpreter/context", self.list_contexts, "GET"),
            ("/process/interpreter/context/{context_id}", self.delete_context, "DELETE"),
        ]

    def websocket_routes(self) -> list[WebSocketRoute]:
        return [WebSocketRoute(f"{PREFIX}/toolbox/{{sandbox_id}}/process/interpreter/execute", self.execute)]

    @staticmethod
    def _json(ctx: Any) -> dict[str, Any]:
        return {**ctx.json(), "active": ctx.alive(), "createdAt": iso(ctx.created_at)}

    async def create_context(self, request: Request, rec: Record, sb: DaytonaSandbox) -> Response:
        body = await self.toolbox._body(request)
        cwd = self.toolbox._path(sb, body["cwd"], "cwd") if body.get("cwd") else sb.work_dir
        ctx = await self.kernels.new(rec, language_of(body.get("language")), cwd)
        return JSONResponse(self._json(ctx))

    async def list_contexts(self, request: Request, rec: Record, sb: DaytonaSandbox) -> Response:
        contexts = self.kernels.contexts(rec)
        defaults = set(map(id, contexts.default.values()))
        made = [c for c in contexts.by_id.values() if id(c) not in defaults]
        return JSONResponse({"contexts": [self._json(c) for c in made]})

    async def delete_context(self, request: Request, rec: Record, sb: DaytonaSandbox) -> Response:
        context_id = request.path_params["context_id"]
        if self.kernels.contexts(rec).remove(context_id) is None:
            raise Refused(404, f"context {context_id} not found")
        return JSONResponse({})

    async def execute(self, ws: WebSocket) -> None:
        try:
            rec, sb = await self.toolbox.target(ws)
        except (E.SandboxError, Refused):
            await ws.close(code=1008)  # before the handshake: the upgrade is refused (403)
            return
        await ws.accept()
        try:
            request = json.loads(await ws.receive_text())
            if not isinstance(request, dict) or not isinstance(request.get("code"), str):
                raise Refused(400, "the first message must be {code, contextId?, envs?, timeout?}")
            if len(request["code"]) > MAX_CODE_BYTES:
                raise Refused(400, "the code is too large")
            envs, timeout = str_map(request.get("envs"), "envs"), request.get("timeout")
            if timeout is not None and (
                isinstance(timeout, bool) or not isinstance(timeout, int) or timeout < 0
            ):
                raise Refused(400, "timeout must be a whole number of seconds")
            with self.toolbox.core.session(rec, "daytona.run_code").charge():
                ctx = await self.kernels.context(rec, sb.work_dir, request.get("contextId"), None)
                restarted = await self.kernels.begin(rec, ctx, request["code"], {**sb.env, **envs})
                code = await self._relay(ws, self.kernels.events(rec, ctx, restarted), timeout or None)
            await ws.close(code=code)
        except (ValueError, Refused, E.SandboxError) as e:
            message = e.message if isinstance(e, (Refused, E.SandboxError)) else "the message must be JSON"
            await ws.send_text(
                json.dumps({"type": "error", "name": "RequestError", "value": message, "traceback": ""})
            )
            await ws.close(code=1000)
        except (WebSocketDisconnect, RuntimeError):
            pass  # the client went away: the cell was interrupted as its events closed

    @staticmethod
    async def _relay(ws: WebSocket, events: Any, timeout: float | None) -> int:
        """Sends the cell's output and errors; the close code (4008 past `timeout`)."""
        try:
            async with asyncio.timeout(timeout):
                async for event in events:
                    kind = event.get("type")
                    if kind in ("stdout", "stderr"):
                        await ws.send_text(json.dumps({"type": kind, "text": event.get("text", "")}))
                    elif kind == "error":
                        fields = {k: str(event.get(k, "")) for k in ("name", "value", "traceback")}
                        await ws.send_text(json.dumps({"type": "error", **fields}))
                    elif kind == "end_of_execution":
                        return 1000
            return 1000
        except TimeoutError:
            return TIMEOUT_CLOSE
        finally:
            await events.aclose()  # interrupts a cell not at its end
