"""The Prime Sandboxes API (`prime-sandboxes` SDK, verifiers' PrimeRuntime) on the server's HTTP
port: the control plane (`api.py`), the per-sandbox gateway (`gateway.py`) with its command
sessions (`sessions.py`) and background-job statuses (`jobs.py`). Sandboxes are the server's
records (`ServerCore.claim`), so quotas, lifetimes (`timeout_minutes` their TTL,
`idle_timeout_minutes` their idle bound) and shutdown treat them as any other; how a sandbox
ended (`_ENDINGS`, by the server's delete reason) is what the API shows of it afterwards."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.routing import BaseRoute

from sandboxes.server.http.prime.api import ControlPlane
from sandboxes.server.http.prime.gateway import Gateway
from sandboxes.server.http.prime.state import PrimeSandbox, Tombstones
from sandboxes.server.http.surface import Surface
from sandboxes.server.http.timestamps import iso
from sandboxes.server.replicated import dataclass_codec

if TYPE_CHECKING:
    from sandboxes.server.auth import ApiKeys
    from sandboxes.server.registry import Record
    from sandboxes.server.surface_core import SurfaceCore

__all__ = ["PrimeApi"]

USER_NS = "sandboxes"

# How a sandbox that leaves the registry ends, by the server's delete reason.
_ENDINGS = {
    "ttl": ("TIMEOUT", "timeout", "TIMEOUT", "the sandbox reached its timeout_minutes"),
    "idle": ("TERMINATED", "idle_timeout", None, None),
    "delete": ("TERMINATED", "deleted", None, None),
    "shutdown": ("TERMINATED", "server_shutdown", None, None),
}


class PrimeApi(Surface):
    def __init__(self, core: SurfaceCore, auth: ApiKeys) -> None:
        self.core = core
        self.auth = auth
        self.tombstones = Tombstones()
        self.control = ControlPlane(self)
        self.gateway = Gateway(self)
        core.add_delete_listener(self._ended)
        # The API's view of a sandbox reaches the other replicas of a cluster with its record.
        core.share_attr(
            "prime",
            dataclass_codec(PrimeSandbox, on_load=self.control.apply_limits),
        )

    def routes(self) -> list[BaseRoute]:
        return [*self.control.routes(), *self.gateway.routes()]

    def owner(self, request: Request) -> str:
        return self.auth.authenticate_header(request.headers.get("authorization"))

    async def gateway_auth(self, request: Request, rec: Record, sb: PrimeSandbox) -> dict[str, Any]:
        """What `POST /sandbox/{id}/auth` answers: the gateway at the address the client used
        (the token, when new, is saved with the record: any replica's gateway accepts it)."""
        token, expires = sb.gateway_token()
        await self.core.save(rec)
        return {
            "gateway_url": str(request.base_url).rstrip("/") + "/gateway",
            "user_ns": USER_NS,
            "job_id": sb.id,
            "token": token,
            "expires_at": iso(expires),
            "is_vm": sb.vm,
        }

    def _ended(self, rec: Record, reason: str) -> None:
        sb = rec.attrs.get("prime")
        if sb is None:
            return
        status, why, error_type, message = _ENDINGS.get(reason, ("TERMINATED", reason, None, None))
        sb.end(status, why, error_type, message)
        self.tombstones.add(rec.owner, sb)
