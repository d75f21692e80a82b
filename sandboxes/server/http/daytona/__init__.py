"""The Daytona API (`daytona` SDK) on the server's HTTP port, under `/daytona`: the control plane
(`api.py`) and the toolbox, the in-sandbox daemon's API (`toolbox.py`, with its process sessions
in `sessions.py`). A user sets `DAYTONA_API_URL` to `http://HOST:PORT/daytona` and
`DAYTONA_API_KEY` to a server key. Sandboxes are the server's records (`ServerCore.claim`), so
quotas, TTLs and shutdown treat them as any other; a key sees only its own."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.routing import BaseRoute
from starlette.websockets import WebSocket

from sandboxes.server.http.daytona.api import PREFIX, ControlPlane
from sandboxes.server.http.daytona.state import DaytonaSandbox
from sandboxes.server.http.daytona.toolbox import Toolbox
from sandboxes.server.http.surface import Surface
from sandboxes.server.replicated import dataclass_codec

if TYPE_CHECKING:
    from sandboxes.server.auth import ApiKeys
    from sandboxes.server.registry import Record
    from sandboxes.server.surface_core import SurfaceCore

__all__ = ["DaytonaApi"]


class DaytonaApi(Surface):
    def __init__(self, core: SurfaceCore, auth: ApiKeys) -> None:
        self.core = core
        self.auth = auth
        self.control = ControlPlane(self)
        self.toolbox = Toolbox(self)
        core.add_delete_listener(self._ended)
        # The API's view of a sandbox reaches the other replicas of a cluster with its record.
        core.share_attr("daytona", dataclass_codec(DaytonaSandbox))

    def routes(self) -> list[BaseRoute]:
        return [*self.control.routes(), *self.toolbox.routes()]

    def websocket_routes(self) -> Sequence[BaseRoute]:
        return self.toolbox.websocket_routes()

    def owner(self, request: Request | WebSocket) -> str:
        return self.auth.authenticate_header(request.headers.get("authorization"))

    @staticmethod
    def toolbox_url(request: Request) -> str:
        """Where the SDK reaches sandboxes' toolboxes: this server, as the client reached it."""
        return str(request.base_url).rstrip("/") + PREFIX + "/toolbox"

    def _ended(self, rec: Record, reason: str) -> None:
        sb = rec.attrs.get("daytona")
        if sb is not None:
            sb.touch("destroyed")
