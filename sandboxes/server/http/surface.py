"""What every API on the server's HTTP port is to the port (`server.py`): a `Surface`.

A surface is one compatible API over the server's core (`SurfaceCore`): its routes, its
WebSocket routes, the `front` hooks that see every request before any route (E2B's in-sandbox
calls, told apart by a header), and what it closes once the port stops serving. The server
(`server/app.py`) makes one list of them; `HttpServer` serves it in its order, each surface's
routes before its WebSocket routes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from starlette.routing import BaseRoute

__all__ = ["Front", "Surface"]

# A hook that sees every request first: `await hook(scope, receive, send)`, True when it served it.
Front = Callable[[Any, Any, Any], Awaitable[bool]]


class Surface(Protocol):
    """One API on the HTTP port. A class that names this protocol as a base gets the defaults:
    no WebSocket routes, no front hook, nothing to close."""

    def routes(self) -> Sequence[BaseRoute]:
        """Its HTTP routes (Starlette routes and mounts), matched in order."""
        ...

    def websocket_routes(self) -> Sequence[BaseRoute]:
        """Its WebSocket routes, matched after its HTTP routes."""
        return []

    def front(self) -> Sequence[Front]:
        """Hooks that see every request before any route."""
        return []

    async def close(self) -> None:
        """Called once the port has stopped serving."""
        return
