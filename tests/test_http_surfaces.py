"""The HTTP port serves one list of `Surface`s (`http/surface.py`): their routes in the list's
order, each surface's WebSocket routes, the `front` hooks before any route, and a `close` of each
once the port stops (one that fails is logged, the others still closed). No sandbox is needed:
the surfaces here are small fakes."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.websockets import WebSocket

from sandboxes.server.http import HttpServer
from sandboxes.server.http.surface import Surface

pytestmark = pytest.mark.asyncio


def _text(body: str) -> Any:
    async def endpoint(request: Request) -> Response:
        return PlainTextResponse(body)

    return endpoint


class First(Surface):
    """Routes only, and a close that fails."""

    def routes(self) -> list[BaseRoute]:
        return [Route("/shared", _text("first"))]

    async def close(self) -> None:
        raise RuntimeError("this surface fails to close")


class Second(Surface):
    """Routes, a WebSocket route, a front hook and a close."""

    def __init__(self) -> None:
        self.closed = 0

    def routes(self) -> list[BaseRoute]:
        return [Route("/shared", _text("second")), Route("/own", _text("own"))]

    def websocket_routes(self) -> list[BaseRoute]:
        return [WebSocketRoute("/echo", self.echo)]

    def front(self) -> list[Any]:
        return [self.hook]

    async def hook(self, scope: Any, receive: Any, send: Any) -> bool:
        if scope["type"] != "http" or scope["path"] != "/anything" or not self._marked(scope):
            return False
        await PlainTextResponse("front")(scope, receive, send)
        return True

    @staticmethod
    def _marked(scope: Any) -> bool:
        return (b"x-front", b"1") in scope.get("headers", [])

    async def echo(self, ws: WebSocket) -> None:
        await ws.accept()
        await ws.send_text(await ws.receive_text())
        await ws.close()

    async def close(self) -> None:
        self.closed += 1


async def test_surfaces_in_order_with_websockets_front_hooks_and_close() -> None:
    second = Second()
    server = HttpServer([First(), second])
    port = await server.start("127.0.0.1", 0)
    base = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as s:
            async with s.get(f"{base}/shared") as r:
                assert (r.status, await r.text()) == (200, "first")  # the list's order
            async with s.get(f"{base}/own") as r:
                assert (r.status, await r.text()) == (200, "own")
            async with s.get(f"{base}/anything", headers={"x-front": "1"}) as r:
                assert (r.status, await r.text()) == (200, "front")
            async with s.get(f"{base}/anything") as r:
                assert r.status == 404  # the hook left it to the routes
            async with s.ws_connect(f"{base}/echo") as ws:
                await ws.send_str("hello")
                assert (await ws.receive()).data == "hello"
    finally:
        await server.stop()
    assert second.closed == 1
