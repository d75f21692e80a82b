"""OpenSandbox snapshots over the core's checkpoints (`sandboxes.state.checkpoints`): what the
SDK's `create_snapshot`, `get_snapshot`, `list_snapshots`, `delete_snapshot` and
`Sandbox.create(snapshot_id=...)` send.

```
POST   /v1/sandboxes/{id}/snapshots  {name?}                         202 Snapshot (Ready)
GET    /v1/snapshots?sandboxId&name&state&page&pageSize              {items, pagination}
GET    /v1/snapshots/{snapshotId}                                    200 Snapshot
DELETE /v1/snapshots/{snapshotId}                                    204
```

A snapshot is the sandbox's files (the platform's snapshot request has no memory mode: its
processes are not part of one); it is whole when the call that takes it returns, so it is
`Ready` at once, and kept until deleted, as the platform's are. A create with its `snapshotId`
starts from those files, answering the image and work dir of the sandbox it was taken of. A key
sees only its own snapshots: another key's is 404.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from sandboxes import errors as E
from sandboxes.server.http.endpoint import Refused
from sandboxes.server.http.timestamps import iso

if TYPE_CHECKING:
    from sandboxes.server.http.opensandbox.api import ControlPlane, Handler
    from sandboxes.state.checkpoints import Checkpoint

__all__ = ["IMAGE_LABEL", "WORK_DIR_LABEL", "Snapshots", "snapshot_json"]

# What a sandbox made from the snapshot answers, as the one it was taken of did.
IMAGE_LABEL = "opensandbox.image"
WORK_DIR_LABEL = "opensandbox.work_dir"
MAX_NAME = 128
SNAPSHOT_NOT_FOUND = "SNAPSHOT::NOT_FOUND"


def snapshot_json(cp: Checkpoint) -> dict[str, Any]:
    """The API's `Snapshot`."""
    out: dict[str, Any] = {
        "id": cp.id,
        "sandboxId": cp.source,
        "status": {
            "state": "Ready",
            "reason": "snapshot_ready",
            "message": "the sandbox's files (not its processes or memory)",
            "lastTransitionAt": iso(cp.created_at),
        },
        "createdAt": iso(cp.created_at),
    }
    if cp.name:
        out["name"] = cp.name
    return out


class Snapshots:
    """The snapshot routes' handlers; `control` is the lifecycle API (its records)."""

    def __init__(self, control: ControlPlane) -> None:
        self.control = control
        self.core = control.core

    def routes(self) -> list[tuple[str, Handler, str]]:
        return [
            ("/sandboxes/{sandbox_id}/snapshots", self.create, "POST"),
            ("/snapshots", self.list, "GET"),
            ("/snapshots/{snapshot_id}", self.get, "GET"),
            ("/snapshots/{snapshot_id}", self.delete, "DELETE"),
        ]

    def of(self, owner: str, snapshot_id: str) -> Checkpoint:
        """`owner`'s snapshot `snapshot_id` (404 otherwise)."""
        try:
            return self.core.checkpoint_of(owner, snapshot_id)
        except E.NotFound:
            raise Refused(
                404, f"Snapshot {snapshot_id} not found", fields={"code": SNAPSHOT_NOT_FOUND}
            ) from None

    async def create(self, request: Request, owner: str) -> Response:
        body = await self.control._body(request) if await request.body() else {}
        rec, sb = await self.control.live(owner, request.path_params["sandbox_id"])
        name = body.get("name") or ""
        if not isinstance(name, str) or len(name) > MAX_NAME:
            raise Refused(400, f"name must be a string of at most {MAX_NAME} characters")
        labels = {IMAGE_LABEL: sb.image, WORK_DIR_LABEL: sb.work_dir}
        cp = await self.core.checkpoint(rec, name=name, ttl_s=None, labels=labels)
        return JSONResponse(snapshot_json(cp), status_code=202)

    async def get(self, request: Request, owner: str) -> Response:
        return JSONResponse(snapshot_json(self.of(owner, request.path_params["snapshot_id"])))

    async def list(self, request: Request, owner: str) -> Response:
        q = request.query_params
        source, name = q.get("sandboxId"), q.get("name")
        states = {s.lower() for s in q.getlist("state")}
        found = [
            cp
            for cp in self.core.checkpoints(owner)
            if (source is None or cp.source == source)
            and (name is None or cp.name == name)
            and (not states or "ready" in states)
        ]
        found.sort(key=lambda cp: (cp.created_at, cp.id), reverse=True)
        return JSONResponse(self.control.paged(q, [snapshot_json(cp) for cp in found]))

    async def delete(self, request: Request, owner: str) -> Response:
        snapshot_id = request.path_params["snapshot_id"]
        self.of(owner, snapshot_id)
        await self.core.delete_checkpoint(owner, snapshot_id)
        return Response(status_code=204)
