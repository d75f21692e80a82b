"""The code interpreter of `e2b-code-interpreter` (the sandbox's port 49999): `run_code` and its
contexts.

```
POST   /execute                {code, context_id, language, env_vars} -> NDJSON events
POST   /contexts               {language?, cwd?} -> {id, language, cwd}
GET    /contexts               [{id, language, cwd}]
DELETE /contexts/{id}          the context's kernel is stopped
POST   /contexts/{id}/restart  a fresh kernel (its state is gone)
```

Each context is a kernel of `kernels.py` (a Python process in the sandbox whose state is kept
across cells). The events of a cell go to the client as they happen (`number_of_executions`,
`stdout` / `stderr`, `result`, `error`, then `end_of_execution`), with a keepalive line every
few seconds of silence so a client that went away is noticed. The SDK's timeout is its own: when
its connection closes mid-cell the cell is interrupted (the context keeps its state). Errors are
plain text with the status the SDK maps: 404 an unknown context, 400 a bad request, 502 a sandbox
that has ended.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from sandboxes.server.http.e2b.envd import in_sandbox
from sandboxes.server.http.endpoint import Envelope, Refused, text_body
from sandboxes.server.http.kernels import Kernels, language_of
from sandboxes.server.http.timestamps import iso

if TYPE_CHECKING:
    from sandboxes.server.http.e2b.state import E2bSandbox
    from sandboxes.server.registry import Record
    from sandboxes.server.surface_core import SurfaceCore

__all__ = ["Interpreter"]

MAX_CODE_BYTES = 16 << 20


# The interpreter's errors are plain text (the SDK reads the body as the message).
ENVELOPE = Envelope("e2b interpreter", text_body)


class Interpreter:
    """The routes of the sandbox's port 49999, for the sandbox in `TARGET`, over the server's
    `core`."""

    def __init__(self, core: SurfaceCore) -> None:
        self.core = core
        self.kernels = Kernels(core)

    def routes(self) -> list[Route]:
        return [
            Route("/execute", self._wrap(self.execute), methods=["POST"]),
            Route("/contexts", self._wrap(self.create_context), methods=["POST"]),
            Route("/contexts", self._wrap(self.list_contexts), methods=["GET"]),
            Route("/contexts/{context_id}", self._wrap(self.remove_context), methods=["DELETE"]),
            Route("/contexts/{context_id}/restart", self._wrap(self.restart_context), methods=["POST"]),
            Route("/health", self._wrap(self.health), methods=["GET"]),
        ]

    @staticmethod
    def _wrap(fn: Any) -> Any:
        return in_sandbox(fn, ENVELOPE)

    async def _body(self, request: Request) -> dict[str, Any]:
        body = await ENVELOPE.json(request, MAX_CODE_BYTES)
        if not isinstance(body, dict):
            raise Refused(400, "the body must be a JSON object")
        return body

    # -- endpoints ---------------------------------------------------------------------------

    async def execute(self, request: Request, rec: Record, sb: E2bSandbox) -> Response:
        body = await self._body(request)
        code = body.get("code")
        if not isinstance(code, str):
            raise Refused(400, "code must be a string")
        env = body.get("env_vars")
        if env is not None and not (
            isinstance(env, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())
        ):
            raise Refused(400, "env_vars must map strings to strings")
        context_id, language = body.get("context_id"), body.get("language")
        if context_id and language:
            raise Refused(400, "Only one of context_id or language can be provided")
        # The cell is an execution of the sandbox owner's: it holds an exec slot until it ends.
        release = self.core.session(rec, "e2b.run_code").hold()
        try:
            ctx = await self.kernels.context(rec, sb.work_dir, context_id, language)
            restarted = await self.kernels.begin(rec, ctx, code, env)
        except BaseException:
            release()
            raise
        return StreamingResponse(self._cell(rec, ctx, restarted, release), media_type="application/x-ndjson")

    async def _cell(
        self, rec: Record, ctx: Any, restarted: bool, release: Callable[[], None]
    ) -> AsyncIterator[bytes]:
        """The cell's events as NDJSON lines; its exec slot is held until the cell ends (a
        client gone mid-cell closes this generator, which interrupts the cell at once)."""
        events = self.kernels.events(rec, ctx, restarted)
        try:
            async for event in events:
                if event["type"] in ("stdout", "stderr"):
                    event.setdefault("timestamp", _now())
                yield _line(event)
        finally:
            await events.aclose()
            release()

    async def create_context(self, request: Request, rec: Record, sb: E2bSandbox) -> Response:
        body = await self._body(request)
        language = language_of(body.get("language"))
        cwd = body.get("cwd") or sb.work_dir
        if not isinstance(cwd, str) or not cwd.startswith("/"):
            raise Refused(400, "cwd must be an absolute path")
        ctx = await self.kernels.new(rec, language, cwd)
        return _json(ctx.json())

    async def list_contexts(self, request: Request, rec: Record, sb: E2bSandbox) -> Response:
        return _json([c.json() for c in self.kernels.contexts(rec).by_id.values()])

    async def remove_context(self, request: Request, rec: Record, sb: E2bSandbox) -> Response:
        if self.kernels.contexts(rec).remove(request.path_params["context_id"]) is None:
            raise Refused(404, f"Context {request.path_params['context_id']} not found")
        return Response(status_code=204)

    async def restart_context(self, request: Request, rec: Record, sb: E2bSandbox) -> Response:
        ctx = self.kernels.contexts(rec).by_id.get(request.path_params["context_id"])
        if ctx is None:
            raise Refused(404, f"Context {request.path_params['context_id']} not found")
        await self.kernels.restart(rec, ctx)
        return Response(status_code=204)

    async def health(self, request: Request, rec: Record, sb: E2bSandbox) -> Response:
        return Response(status_code=204)


def _now() -> str:
    return iso(time.time())


def _line(event: dict[str, Any]) -> bytes:
    return json.dumps(event).encode() + b"\n"


def _json(value: Any) -> Response:
    return Response(json.dumps(value), media_type="application/json")
