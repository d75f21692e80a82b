"""E2B snapshots over the core's checkpoints (`sandboxes.state.checkpoints`): what e2b's
`create_snapshot`, `list_snapshots`, `delete_snapshot` and `Sandbox.create(snapshot_id)` send.

```
POST   /sandboxes/{id}/snapshots   {memory: false}  201 {snapshotID, names}: a filesystem snapshot
POST   /sandboxes/{id}/snapshots   (memory unset or true: the SDK's default "full")   501
POST   /sandboxes/{id}/fork                                                            501
GET    /snapshots?sandboxID=&name=&limit=                                              [SnapshotInfo]
DELETE /templates/{snapshotID}  (routed by `templates.py`)                             204 / 404
```

A full snapshot and a fork carry the sandbox's running processes and memory; this server takes
filesystem checkpoints only, so those calls are refused with an error that says so and names what
the host lacks (`sandboxes.server.criu`), never answered with a filesystem copy under a name that
promises processes. A snapshot
is kept until deleted, as the platform's are; a key sees only its own (another key's is 404).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from sandboxes import errors as E
from sandboxes.server.criu import memory_snapshots_missing
from sandboxes.server.http.endpoint import Refused

if TYPE_CHECKING:
    from sandboxes.server.http.e2b.api import ControlPlane, Handler
    from sandboxes.state.checkpoints import Checkpoint

__all__ = ["Snapshots"]

MAX_NAME = 128


async def no_memory() -> str:
    """Why a call that promises processes is refused (the host is probed once, off the loop)."""
    missing = await asyncio.to_thread(memory_snapshots_missing)
    return (
        "memory snapshots are not available on this server: it keeps a sandbox's files, not its "
        f"running processes or memory ({missing})"
    )


def snapshot_json(cp: Checkpoint) -> dict[str, Any]:
    """The SDK's `SnapshotInfo`: its id (what `Sandbox.create` takes) and names."""
    return {"snapshotID": cp.id, "names": [f"{cp.name}:default"] if cp.name else [cp.id]}


class Snapshots:
    """The snapshot routes' handlers; `control` is the control plane (its records)."""

    def __init__(self, control: ControlPlane) -> None:
        self.control = control
        self.core = control.core

    def routes(self) -> list[tuple[str, Handler, str]]:
        return [
            ("/sandboxes/{sandbox_id}/snapshots", self.create, "POST"),
            ("/sandboxes/{sandbox_id}/fork", self.fork, "POST"),
            ("/snapshots", self.list, "GET"),
        ]

    async def create(self, request: Request, owner: str) -> Response:
        body = await self.control._body(request)
        rec, _ = await self.control.live(owner, request.path_params["sandbox_id"])
        if body.get("memory") is not False:
            raise Refused(501, f"{await no_memory()}; take it with mode='filesystem'")
        name = body.get("name") or ""
        if not isinstance(name, str) or len(name) > MAX_NAME:
            raise Refused(400, f"name must be a string of at most {MAX_NAME} characters")
        cp = await self.core.checkpoint(rec, name=name, ttl_s=None)
        return JSONResponse(snapshot_json(cp), status_code=201)

    async def fork(self, request: Request, owner: str) -> Response:
        await self.control.live(owner, request.path_params["sandbox_id"])
        raise Refused(
            501,
            f"forking carries the sandbox's running processes: {await no_memory()}; take a snapshot with "
            "mode='filesystem' and create sandboxes from it",
        )

    async def list(self, request: Request, owner: str) -> Response:
        q = request.query_params
        source, name = q.get("sandboxID"), q.get("name")
        try:
            limit = max(1, min(int(q.get("limit", 100)), 1000))
        except ValueError:
            raise Refused(400, "limit must be an integer") from None
        name = name.split(":", 1)[0].rsplit("/", 1)[-1] if name else None
        found = [
            cp
            for cp in self.core.checkpoints(owner)
            if (source is None or cp.source == source) and (name is None or name in (cp.name, cp.id))
        ]
        return JSONResponse([snapshot_json(cp) for cp in found[:limit]])

    async def delete(self, request: Request, owner: str) -> Response:
        try:
            await self.core.delete_checkpoint(owner, request.path_params["template_id"])
        except E.NotFound:
            raise Refused(404, f"template {request.path_params['template_id']!r} not found") from None
        return Response(status_code=204)
