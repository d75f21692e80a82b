"""The Daytona API (`daytona` SDK) on the server's HTTP port, under `/daytona`: the control plane
(`api.py`) and the toolbox, the in-sandbox daemon's API (`toolbox.py`, with its process sessions
in `sessions.py`). A user sets `DAYTONA_API_URL` to `http://HOST:PORT/daytona` and
`DAYTONA_API_KEY` to a server key. Sandboxes are the server's records (`ServerCore.claim`), so
quotas, TTLs and shutdown treat them as any other; a key sees only its own."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.websockets import WebSocket

from sandboxes.server.http.daytona.api import PREFIX, ControlPlane
from sandboxes.server.http.daytona.state import DaytonaSandbox
from sandboxes.server.http.daytona.toolbox import Toolbox
from sandboxes.server.http.kernels import ATTR as KERNELS_ATTR
from sandboxes.server.replicated import dataclass_codec

__all__ = ["DaytonaApi"]


class DaytonaApi:
    def __init__(self, core: Any, auth: Any) -> None:
        self.core = core
        self.auth = auth
        self.control = ControlPlane(self)
        self.toolbox = Toolbox(self)
        core.on_delete.append(self._ended)
        # The API's view of a sandbox reaches the other replicas of a cluster with its record.
        core.share_attr("daytona", dataclass_codec(DaytonaSandbox))

    def routes(self) -> list[Any]:
        return self.control.routes() + self.toolbox.routes() + self.toolbox.websocket_routes()

    def owner(self, request: Request | WebSocket) -> str:
        return self.auth.authenticate_header(request.headers.get("authorization"))

    @staticmethod
    def toolbox_url(request: Request) -> str:
        """Where the SDK reaches sandboxes' toolboxes: this server, as the client reached it."""
        return str(request.base_url).rstrip("/") + PREFIX + "/toolbox"

    def _ended(self, rec: Any, reason: str) -> None:
        sb = rec.attrs.get("daytona")
        if sb is not None:
            sb.touch("destroyed")
        kernels = rec.attrs.get(KERNELS_ATTR)
        if kernels is not None:
            kernels.close()
        for pty in rec.attrs.get("daytona_ptys", {}).values():
            pty.kill()
        sessions = rec.attrs.get("daytona_sessions")
        if sessions is not None:
            sessions.close()
