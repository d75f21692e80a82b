"""The OpenHands runtime API (the remote runtime `openhands-workspace`'s `APIRemoteWorkspace` and
OpenHands' V0 `RemoteRuntime` start agent servers through) on the server's HTTP port, under
`/openhands`: `api.py` the runtimes, `images.py` the image routes over built templates. A user
sets the client's runtime API URL to `http://HOST:PORT/openhands` and its runtime API key
(`X-API-Key`) to a server key. A runtime is a sandbox of the server's (`ServerCore.create`), so
quotas, TTLs and shutdown treat it as any other; a key sees only its own."""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.routing import BaseRoute

from sandboxes import errors as E
from sandboxes.server.http.openhands.api import Runtimes
from sandboxes.server.http.openhands.images import Images
from sandboxes.server.http.openhands.state import ATTR, Runtime
from sandboxes.server.http.surface import Surface
from sandboxes.server.replicated import dataclass_codec
from sandboxes.types import Limits

if TYPE_CHECKING:
    from sandboxes.server.auth import ApiKeys
    from sandboxes.server.registry import Record
    from sandboxes.server.surface_core import SurfaceCore

__all__ = ["OpenHandsApi"]

KEY_HEADER = "x-api-key"
SERVER = "openhands.server"  # the kind of a runtime's agent server among its long-lived programs
# The agent server runs for the runtime's life, at most the agent's ceiling of a program's wall time.
SERVER_LIFETIME_S = 24 * 3600.0
SERVER_LIMITS = Limits(wall_time_s=SERVER_LIFETIME_S, cpu_time_s=SERVER_LIFETIME_S)


class OpenHandsApi(Surface):
    def __init__(self, core: SurfaceCore, auth: ApiKeys) -> None:
        self.core = core
        self.auth = auth
        self.runtimes = Runtimes(self)
        self.images = Images(self)
        # The API's view of a runtime reaches the other replicas of a cluster with its record.
        core.share_attr(ATTR, dataclass_codec(Runtime))

    def routes(self) -> list[BaseRoute]:
        return [*self.images.routes(), *self.runtimes.routes()]

    def owner(self, request: Request) -> str:
        key = request.headers.get(KEY_HEADER)
        return self.auth.authenticate_header(f"Bearer {key}" if key else None)

    def start_server(self, rec: Record, rt: Runtime, env: dict[str, str]) -> None:
        """Starts `rt`'s command (its agent server) as its sandbox's main process (not charged:
        it is the runtime's own), keeping the tail of its output and its exit for `pod_logs`."""
        programs = self.core.programs(rec)
        stream = programs.start(
            SERVER,
            "server",
            ["/bin/sh", "-c", rt.command],
            charge=None,
            env=env,
            cwd=rt.working_dir,
            timeout=SERVER_LIFETIME_S,
            stdin=b"",
            limits=SERVER_LIMITS,
            keep_descendants=True,
        )

        async def follow() -> None:
            code = -1
            with contextlib.suppress(E.SandboxError):
                async for ev in stream:
                    if ev.kind in ("stdout", "stderr"):
                        rt.add_output(ev.data)
                    elif ev.kind == "exit" and ev.result is not None:
                        code = ev.result.exit_code
            rt.exit_code = code

        programs.state(SERVER, lambda: asyncio.create_task(follow(), name=f"openhands-server-{rec.id}"))
