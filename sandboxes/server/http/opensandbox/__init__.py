"""The OpenSandbox API (`opensandbox` SDK) on the server's HTTP port, under `/opensandbox`: the
lifecycle API (`api.py`) and the in-sandbox execd and egress sidecar (`execd.py`, with its
commands, files and egress policy in `commands.py`, `files.py`, `egress.py`). A user sets the
SDK's `domain` (`OPEN_SANDBOX_DOMAIN`) to `http://HOST:PORT/opensandbox` and its `api_key`
(`OPEN_SANDBOX_API_KEY`) to a server key. Sandboxes are the server's records
(`ServerCore.create`), so quotas, TTLs and shutdown treat them as any other; a key sees only its
own."""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

from starlette.requests import HTTPConnection
from starlette.routing import BaseRoute

from sandboxes import errors as E
from sandboxes.server.http.opensandbox.api import ControlPlane
from sandboxes.server.http.opensandbox.execd import Execd
from sandboxes.server.http.opensandbox.state import ATTR, OpenSandbox
from sandboxes.server.http.surface import Surface
from sandboxes.server.replicated import dataclass_codec
from sandboxes.types import Limits

if TYPE_CHECKING:
    from sandboxes.server.auth import ApiKeys
    from sandboxes.server.registry import Record
    from sandboxes.server.surface_core import SurfaceCore

__all__ = ["OpenSandboxApi"]

KEY_HEADER = "open-sandbox-api-key"
MAIN = "opensandbox.main"  # the kind of a sandbox's entrypoint among its long-lived programs
# The entrypoint runs for the sandbox's life, at most the agent's ceiling of a program's wall time.
MAIN_LIFETIME_S = 24 * 3600.0
MAIN_LIMITS = Limits(wall_time_s=MAIN_LIFETIME_S, cpu_time_s=MAIN_LIFETIME_S)


class OpenSandboxApi(Surface):
    def __init__(self, core: SurfaceCore, auth: ApiKeys) -> None:
        self.core = core
        self.auth = auth
        self.control = ControlPlane(self)
        self.execd = Execd(self)
        # The API's view of a sandbox reaches the other replicas of a cluster with its record.
        core.share_attr(ATTR, dataclass_codec(OpenSandbox))

    def routes(self) -> list[BaseRoute]:
        return [*self.control.routes(), *self.execd.routes()]

    def websocket_routes(self) -> list[BaseRoute]:
        return [*self.execd.websocket_routes()]

    def owner(self, request: HTTPConnection) -> str:
        key = request.headers.get(KEY_HEADER)
        return self.auth.authenticate_header(f"Bearer {key}" if key else None)

    def start_main(self, rec: Record, sb: OpenSandbox) -> None:
        """Starts `sb`'s entrypoint as its sandbox's main process (not charged: it is the
        sandbox's own), its output read and dropped; it ends with the sandbox."""
        programs = self.core.programs(rec)
        stream = programs.start(
            MAIN,
            "main",
            sb.entrypoint,
            charge=None,
            env=sb.env,
            cwd=sb.work_dir,
            timeout=MAIN_LIFETIME_S,
            stdin=b"",
            limits=MAIN_LIMITS,
            keep_descendants=True,
        )

        async def drain() -> None:
            with contextlib.suppress(E.SandboxError):
                async for _ in stream:
                    pass

        programs.state(MAIN, lambda: asyncio.create_task(drain(), name=f"opensandbox-main-{rec.id}"))
