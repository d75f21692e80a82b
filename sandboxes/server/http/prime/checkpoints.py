"""The Prime Sandboxes API's filesystem checkpoints, `{base}/api/v1/sandbox/.../checkpoints`, over
the core's checkpoints (`sandboxes.state.checkpoints`): what the SDK's `checkpoint`, `get_checkpoint`,
`get_checkpoints` (`checkpoints:batchGet`), `list_checkpoints`, `delete_checkpoint`,
`delete_sandbox_checkpoints` and `wait_for_checkpoint` send, and `create` with a `checkpoint_id`
(`parse_create`). A checkpoint is whole when the call that takes it returns, so it is `DURABLE`
at once. A key sees only its own checkpoints: another key's is the SDK's not-found.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from sandboxes import errors as E
from sandboxes.server.http.prime.requests import parse_ids
from sandboxes.server.http.timestamps import iso

if TYPE_CHECKING:
    from sandboxes.server.http.prime.api import ControlPlane, Handler
    from sandboxes.state.checkpoints import Checkpoint

__all__ = ["IMAGE_LABEL", "Checkpoints"]

# The image the checkpointed sandbox was created from, kept with the checkpoint: a sandbox
# restored from it answers that image, as the platform's do.
IMAGE_LABEL = "prime.docker_image"


def checkpoint_json(cp: Checkpoint) -> dict[str, Any]:
    """The SDK's `SandboxCheckpoint` (snake_case)."""
    return {
        "id": cp.id,
        "sandbox_id": cp.source,
        "parent_id": None,
        "team_id": None,
        "state": "DURABLE",
        "depth": len(cp.layers) - 1,
        "docker_image": cp.labels.get(IMAGE_LABEL, cp.template),
        "disk_size_bytes": cp.bytes,
        "stored_bytes": cp.bytes,
        "occupied_bytes": cp.bytes,
        "error": None,
        "created_at": iso(cp.created_at),
        "updated_at": iso(cp.created_at),
    }


class Checkpoints:
    """The checkpoint routes' handlers; `control` is the control plane (its records and views)."""

    def __init__(self, control: ControlPlane) -> None:
        self.control = control
        self.core = control.core

    def routes(self) -> list[tuple[str, Handler, str]]:
        """(path, handler, method), the specific paths before the control plane's `{sandbox_id}`."""
        return [
            ("/api/v1/sandbox/checkpoints:batchGet", self.batch_get, "POST"),
            ("/api/v1/sandbox/checkpoints/{checkpoint_id}", self.get, "GET"),
            ("/api/v1/sandbox/checkpoints/{checkpoint_id}", self.delete, "DELETE"),
            ("/api/v1/sandbox/{sandbox_id}/checkpoints", self.create, "POST"),
            ("/api/v1/sandbox/{sandbox_id}/checkpoints", self.list, "GET"),
            ("/api/v1/sandbox/{sandbox_id}/checkpoints", self.delete_all, "DELETE"),
        ]

    async def create(self, request: Request, owner: str) -> Response:
        rec = await self.core.record(request.path_params["sandbox_id"], owner)
        view = rec.attrs.get("prime")
        image = view.docker_image if view is not None else rec.template
        cp = await self.core.checkpoint(rec, labels={IMAGE_LABEL: image})
        return JSONResponse(checkpoint_json(cp))

    async def get(self, request: Request, owner: str) -> Response:
        return JSONResponse(
            checkpoint_json(self.core.checkpoint_of(owner, request.path_params["checkpoint_id"]))
        )

    async def delete(self, request: Request, owner: str) -> Response:
        await self.core.delete_checkpoint(owner, request.path_params["checkpoint_id"])
        return JSONResponse({})

    def _of_sandbox(self, owner: str, sandbox_id: str) -> list[Checkpoint]:
        return [cp for cp in self.core.checkpoints(owner) if cp.source == sandbox_id]

    async def list(self, request: Request, owner: str) -> Response:
        sandbox_id = request.path_params["sandbox_id"]
        only = request.query_params.get("checkpoint_id")
        cps = [cp for cp in self._of_sandbox(owner, sandbox_id) if only is None or cp.id == only]
        return JSONResponse({"checkpoints": [checkpoint_json(cp) for cp in cps]})

    async def delete_all(self, request: Request, owner: str) -> Response:
        deleted = []
        for cp in self._of_sandbox(owner, request.path_params["sandbox_id"]):
            await self.core.delete_checkpoint(owner, cp.id)
            deleted.append(cp.id)
        return JSONResponse({"deleted": deleted, "errors": []})

    async def batch_get(self, request: Request, owner: str) -> Response:
        ids = parse_ids(await self.control._body(request), "checkpoint_ids")
        found, errors = [], []
        for cid in ids:
            try:
                found.append(checkpoint_json(self.core.checkpoint_of(owner, cid)))
            except E.NotFound:
                errors.append({"checkpoint_id": cid, "code": "NOT_FOUND", "message": f"no checkpoint {cid}"})
        return JSONResponse({"checkpoints": found, "errors": errors})
