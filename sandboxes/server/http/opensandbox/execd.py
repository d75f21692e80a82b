"""execd, the in-sandbox daemon the SDK talks to (the endpoint of port 44772), and the egress
sidecar's policy API (port 18080), both served by this server.

Each is reached two ways, as the lifecycle API hands out its endpoint (`api.py`):

- direct (the SDK's default): `/opensandbox/execd/{sandbox id}/{token}/...` and
  `/opensandbox/egress/{sandbox id}/{token}/...`: the SDK sends no key there, so the path holds
  the sandbox's own token (`OpenSandbox.execd_token`); a wrong one is the same 404 as no sandbox;
- through the server (`use_server_proxy`): `/opensandbox/v1/sandboxes/{id}/proxy/{port}/...`
  with the key in `OPEN-SANDBOX-API-KEY`, as the platform's server proxy takes it.

```
GET    /ping                   200 (execd answers: the sandbox is ready)
/command...                    commands (`commands.py`)
/files..., /directories...     the file system (`files.py`)
/policy                        the egress policy (`egress.py`, on the egress endpoint)
```

PTY sessions (`/pty`, their WebSocket at both endpoints) are `pty.py`'s. Refused with execd's
body (`{code, message}`, 501 `NOT_SUPPORTED`): the code interpreter (`/code`), bash sessions
(`/session`), metrics, listing PTY sessions and isolated sessions. A call to
a paused sandbox is 409. Every call is activity for the sandbox (`ServerCore.touch`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket

from sandboxes import errors as E
from sandboxes.server.http.endpoint import SHUTTING_DOWN, Envelope, Refused
from sandboxes.server.http.opensandbox.api import API, EGRESS_PORT, EXECD_PORT, PREFIX
from sandboxes.server.http.opensandbox.commands import Commands
from sandboxes.server.http.opensandbox.egress import Egress
from sandboxes.server.http.opensandbox.files import Files
from sandboxes.server.http.opensandbox.pty import Ptys
from sandboxes.server.http.opensandbox.state import ATTR, view

if TYPE_CHECKING:
    from sandboxes.server.http.opensandbox import OpenSandboxApi
    from sandboxes.server.http.opensandbox.state import OpenSandbox
    from sandboxes.server.registry import Record

__all__ = ["ENVELOPE", "Execd"]

MAX_BODY_BYTES = 4 << 20
_CODES = {
    400: "INVALID_REQUEST_BODY",
    404: "FILE_NOT_FOUND",
    413: "INVALID_FILE",
    501: "NOT_SUPPORTED",
}


def execd_body(status: int, message: str) -> dict[str, Any]:
    """execd's error body: `{code, message}`."""
    return {"code": _CODES.get(status, "RUNTIME_ERROR"), "message": message}


ENVELOPE = Envelope("opensandbox execd", execd_body)
Handler = Callable[[Request, "Record", "OpenSandbox"], Awaitable[Response]]

# execd's routes this server does not serve (501).
_UNSUPPORTED = (
    ("/code", "the code interpreter", ["GET", "POST", "DELETE"]),
    ("/code/{rest:path}", "the code interpreter", ["GET", "POST", "DELETE"]),
    ("/session", "bash sessions", ["POST"]),
    ("/session/{rest:path}", "bash sessions", ["GET", "POST", "DELETE"]),
    ("/metrics", "metrics", ["GET"]),
    ("/metrics/watch", "metrics", ["GET"]),
    ("/pty", "listing pseudo-terminals", ["GET"]),
    ("/v1/isolated/{rest:path}", "isolated sessions", ["GET", "POST", "DELETE"]),
)


class Execd:
    """The routes of execd and the egress sidecar; `api` is the shared state (`OpenSandboxApi`)."""

    def __init__(self, api: OpenSandboxApi) -> None:
        self.api = api
        self.core = api.core
        self.commands = Commands(self)
        self.files = Files(self)
        self.egress = Egress(self)
        self.ptys = Ptys(self)

    def routes(self) -> list[Route]:
        execd: list[tuple[str, Any, str]] = [
            ("/ping", self.ping, "GET"),
            *self.commands.routes(),
            *self.files.routes(),
            *self.ptys.routes(),
        ]
        for path, what, methods in _UNSUPPORTED:
            execd += [(path, self._unsupported(what), m) for m in methods]
        routes = [
            r for path, fn, method in execd for r in self._routes("execd", EXECD_PORT, path, fn, method)
        ]
        egress: list[tuple[str, Any, str]] = [
            *self.egress.routes(),
            ("/credential-vault", self._unsupported("the credential vault"), "GET"),
            ("/credential-vault/{rest:path}", self._unsupported("the credential vault"), "GET"),
        ]
        egress += [
            ("/credential-vault", self._unsupported("the credential vault"), m)
            for m in ("POST", "PATCH", "DELETE")
        ]
        routes += [
            r for path, fn, method in egress for r in self._routes("egress", EGRESS_PORT, path, fn, method)
        ]
        return routes

    def _routes(self, what: str, port: int, path: str, fn: Handler, method: str) -> list[Route]:
        """`fn` at `path` of both endpoints of the service: the direct one (its token in the path)
        and the server's proxy (the key)."""

        async def direct(request: Request) -> Response:
            if self.core.draining:
                raise Refused(503, SHUTTING_DOWN)
            rec, sb = await self.target(request.path_params["sandbox_id"], None, request.path_params["token"])
            return await fn(request, rec, sb)

        async def proxied(request: Request, owner: str) -> Response:
            rec, sb = await self.target(request.path_params["sandbox_id"], owner, None)
            return await fn(request, rec, sb)

        keyed = ENVELOPE.keyed(proxied, owner=self.api.owner, draining=lambda: self.core.draining)
        return [
            Route(
                f"{PREFIX}/{what}/{{sandbox_id}}/{{token}}{path}", ENVELOPE.guard(direct), methods=[method]
            ),
            Route(f"{API}/sandboxes/{{sandbox_id}}/proxy/{port}{path}", keyed, methods=[method]),
        ]

    def websocket_routes(self) -> list[WebSocketRoute]:
        """The PTY sessions' WebSockets (`pty.py`), at both endpoints of execd."""
        tail = "/pty/{session_id}/ws"
        return [
            WebSocketRoute(f"{PREFIX}/execd/{{sandbox_id}}/{{token}}{tail}", self._pty_ws),
            WebSocketRoute(f"{API}/sandboxes/{{sandbox_id}}/proxy/{EXECD_PORT}{tail}", self._pty_ws),
        ]

    async def _pty_ws(self, ws: WebSocket) -> None:
        token = ws.path_params.get("token")
        try:
            if self.core.draining:
                raise Refused(503, SHUTTING_DOWN)
            owner = None if token is not None else self.api.owner(ws)
            rec, _ = await self.target(ws.path_params["sandbox_id"], owner, token)
        except (E.SandboxError, Refused):
            await ws.close(code=1008)  # before the handshake: the upgrade is refused (403)
            return
        await self.ptys.connect(ws, rec)

    async def target(
        self, sandbox_id: str, owner: str | None, token: str | None
    ) -> tuple[Record, OpenSandbox]:
        """The running sandbox a call is for: `owner`'s, or the one whose token it bears."""
        rec = await self.core.find_record(sandbox_id, owner)
        if (
            rec is None
            or ATTR not in rec.attrs
            or (token is not None and not rec.attrs[ATTR].token_ok(token))
        ):
            raise Refused(404, f"sandbox {sandbox_id} not found", fields={"code": "SANDBOX_NOT_FOUND"})
        sb = view(rec)
        if sb.state != "Running":
            raise Refused(
                409,
                f"sandbox {sandbox_id} is paused: resume it first",
                fields={"code": "SANDBOX_NOT_RUNNING"},
            )
        self.core.touch(rec)
        return rec, sb

    async def body(self, request: Request) -> Any:
        return await ENVELOPE.json(request, MAX_BODY_BYTES)

    async def ping(self, request: Request, rec: Record, sb: OpenSandbox) -> Response:
        return Response(status_code=200)

    @staticmethod
    def _unsupported(what: str) -> Handler:
        async def refuse(request: Request, rec: Record, sb: OpenSandbox) -> Response:
            raise Refused(501, f"{what} is not supported by this server", fields={"code": "NOT_SUPPORTED"})

        return refuse
