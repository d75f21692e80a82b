"""The server's one HTTP port (`sandboxes serve --http-port`): every HTTP-compatible API on it.

An ASGI application (Starlette routing, the Connect services mounted into it) served by uvicorn
on a socket bound here, so port 0 works and the bound port is known before serving. Each surface
(`fusion.py`, `piston.py`, `prime/`, `e2b/`) contributes routes; a surface whose requests are
told apart by a header rather than a path (E2B's in-sandbox calls) contributes a `front` hook,
which sees every request first. Errors a surface does not catch become its JSON error shape,
never a traceback page.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import socket
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse

__all__ = ["HttpServer"]

log = logging.getLogger("sandboxes.server.http")


class HttpServer:
    """Serves `routes` (Starlette routes / mounts) behind the `front` hooks (`await hook(scope,
    receive, send)` -> True when it served the request); `await start(host, port)` returns the
    port."""

    def __init__(
        self,
        routes: Sequence[Any],
        *,
        front: Sequence[Callable[[Any, Any, Any], Awaitable[bool]]] = (),
        grace_s: float = 5.0,
    ) -> None:
        self.routes = list(routes)
        self.front = list(front)
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
        """Stop accepting, let running requests finish within `grace_s`, then close."""
        if self._server is None or self._task is None:
            return
        self._server.should_exit = True
        try:
            await self._task
        finally:
            self._server = self._task = None
            self._sock.close()


class _Server(uvicorn.Server):
    """uvicorn's server without its signal handlers: the process's SIGTERM / SIGINT belong to
    `sandboxes.server.app.serve`, which stops every surface in order."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield
