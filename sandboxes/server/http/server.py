"""The server's one HTTP port (`sandboxes serve --http-port`): every HTTP-compatible API on it.

An ASGI application (Starlette routing, the Connect services mounted into it) served by uvicorn
on a socket bound here, so port 0 works and the bound port is known before serving. It serves a
list of surfaces (`surface.py`: `fusion.py`, `piston.py`, `prime/`, `e2b/`, `daytona/`,
`opensandbox/`), each contributing its routes and WebSocket routes; a surface whose requests are
told apart by a header rather than a path (E2B's in-sandbox calls) contributes a `front` hook, which sees every request
first; each is closed once the port stops. A connection whose first request names a sandbox's
port (its Host `{port}-{id}.domain`, as E2B's `get_host` and Daytona's preview links form it) is
handed, before any of it is parsed as a request here, to the server's port carrier (`ports.py`).
Errors a surface does not catch become its JSON error shape, never a traceback page.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import socket
from collections.abc import Iterator, Sequence
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse

from sandboxes.server.http.surface import Surface

__all__ = ["HttpServer"]

log = logging.getLogger("sandboxes.server.http")


class HttpServer:
    """Serves `surfaces` (`Surface`): their routes in the list's order, behind their `front`
    hooks (`await hook(scope, receive, send)` -> True when it served the request); `await
    start(host, port)` returns the port; `stop` closes the surfaces too."""

    def __init__(
        self,
        surfaces: Sequence[Surface],
        *,
        ports: Any = None,
        grace_s: float = 5.0,
    ) -> None:
        self.surfaces = list(surfaces)
        self.routes = [r for s in self.surfaces for r in (*s.routes(), *s.websocket_routes())]
        self.front = [hook for s in self.surfaces for hook in s.front()]
        self.ports = ports  # a `PortProxy`: takes connections that name a sandbox's port
        self.grace_s = grace_s
        self.port: int | None = None
        self._server: Any = None
        self._task: asyncio.Task | None = None

    def app(self) -> Any:
        async def http_error(request: Any, exc: Exception) -> JSONResponse:
            if not isinstance(exc, HTTPException):  # registered for that class only
                raise exc
            return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)

        async def unexpected(request: Any, exc: Exception) -> JSONResponse:
            log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
            return JSONResponse({"detail": "internal server error"}, status_code=500)

        routed = Starlette(
            routes=self.routes,
            exception_handlers={HTTPException: http_error, Exception: unexpected},
        )
        front = self.front
        if not front:
            return routed

        async def app(scope: Any, receive: Any, send: Any) -> None:
            for hook in front:
                if await hook(scope, receive, send):
                    return
            await routed(scope, receive, send)

        return app

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            # Inherited by the accepted connections (Linux): a streamed answer (a Connect command's
            # events) goes out as it is written, not held for the peer's delayed ACK (40 ms a call
            # on the default asyncio loop, which leaves sockets it did not make as they are).
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.bind((host, port))
            sock.listen(1024)
            sock.setblocking(False)
        except BaseException:
            sock.close()
            raise
        config = uvicorn.Config(
            self.app(),
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=math.ceil(self.grace_s),
            # Long commands stream keepalives; an idle keep-alive connection may wait this long.
            timeout_keep_alive=75,
        )
        if self.ports is not None:
            config.load()
            config.http_protocol_class = _handing_over(config.http_protocol_class, self.ports)
        server = _Server(config)
        self._server = server
        self._task = asyncio.create_task(server.serve(sockets=[sock]), name="sandboxes-http")
        while not server.started:
            if self._task.done():
                sock.close()
                await self._task  # raises what stopped it
                raise OSError(f"the HTTP server on {host}:{port} stopped while starting")
            await asyncio.sleep(0.01)
        self.port = sock.getsockname()[1]
        self._sock = sock
        return self.port

    async def stop(self) -> None:
        """Stop accepting, let running requests finish within `grace_s`, then close, and close
        the surfaces."""
        if self._server is None or self._task is None:
            return
        self._server.should_exit = True
        try:
            await self._task
        finally:
            self._server = self._task = None
            self._sock.close()
            for surface in self.surfaces:
                try:
                    await surface.close()
                except Exception:
                    log.exception("closing the HTTP surface %s failed", type(surface).__name__)


# Bytes of a first request head read before deciding where its connection goes.
MAX_FIRST_HEAD = 16 << 10


def _handing_over(base: Any, ports: Any) -> Any:
    """uvicorn's HTTP protocol `base`, except that a connection whose first request head names a
    sandbox's port (`ports.names_a_port`) goes to `ports.adopt`, with what was read of it, before
    uvicorn sees any of it."""

    class Protocol(base):  # type: ignore[misc, valid-type]
        def connection_made(self, transport: Any) -> None:
            self._first: bytearray | None = bytearray()
            super().connection_made(transport)

        def data_received(self, data: bytes) -> None:
            first = self._first
            if first is None:
                super().data_received(data)
                return
            first += data
            end = first.find(b"\r\n\r\n")
            if end < 0 and len(first) <= MAX_FIRST_HEAD:
                return
            self._first = None
            if end >= 0 and ports.names_a_port(bytes(first[:end])):
                sock = self.transport.get_extra_info("socket")
                conn = socket.socket(fileno=os.dup(sock.fileno()))
                self.transport.close()  # its descriptor; the connection lives on in `conn`
                ports.adopt(conn, bytes(first))
                return
            super().data_received(bytes(first))

    return Protocol


class _Server(uvicorn.Server):
    """uvicorn's server without its signal handlers: the process's SIGTERM / SIGINT belong to
    `sandboxes.server.app.serve`, which stops every surface in order."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield
