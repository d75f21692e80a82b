"""E2B snapshots over the core's checkpoints (`sandboxes.state.checkpoints`): what e2b's
`create_snapshot`, `fork`, `list_snapshots`, `delete_snapshot` and `Sandbox.create(snapshot_id)` send.

```
POST   /sandboxes/{id}/snapshots   {memory: false}  201 {snapshotID, names}: a filesystem snapshot
POST   /sandboxes/{id}/snapshots   (memory unset or true: the SDK's default "full")   201, same
POST   /sandboxes/{id}/fork        {timeout?, count?}          201 [{sandbox} | {error: {code, message}}]
GET    /snapshots?sandboxID=&name=&limit=                                              [SnapshotInfo]
DELETE /templates/{snapshotID}  (routed by `templates.py`)                             204 / 404
```

A full snapshot and a fork carry the sandbox's running processes (`Pool.checkpoint(memory=True)`:
their memory, open files and sockets; their standard streams become the new sandbox's
`/dev/null`), so a sandbox made from one runs them on from that moment. Where the backend or the
host's CRIU cannot take them, those calls are refused (501) with what is missing, never answered
with a copy of the files alone under a name that promises processes; a program CRIU cannot dump
is a 409 naming it, and the sandbox runs on. A fork is a snapshot taken once and `count` sandboxes
made from it (the source keeps its id and its end), each made or failed on its own, as the
platform answers; the snapshot itself is not kept. A snapshot is kept until deleted, as the
platform's are; a key sees only its own (another key's is 404).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from sandboxes import errors as E
from sandboxes.server.http.endpoint import Refused
from sandboxes.server.http.statuses import http_status

if TYPE_CHECKING:
    from sandboxes.server.http.e2b.api import ControlPlane, Handler
    from sandboxes.server.http.e2b.state import E2bSandbox
    from sandboxes.server.registry import Record
    from sandboxes.server.surface_core import SurfaceCore
    from sandboxes.state.checkpoints import Checkpoint

__all__ = ["Snapshots"]

MAX_NAME = 128
MAX_FORKS = 20  # the platform's bound of one fork call (the SDK checks it too)
log = logging.getLogger(__name__)


async def no_memory(core: SurfaceCore, rec: Record) -> str | None:
    """Why a call that promises processes is refused for `rec`'s sandbox; None when it is not."""
    missing = await core.memory_snapshots_missing(rec)
    if not missing:
        return None
    return f"memory snapshots are not available for this sandbox: {missing}"


def fork_result(made: E2bSandbox | BaseException) -> dict[str, Any]:
    """One fork's entry: the sandbox as a create answers it, or the error it failed with."""
    if isinstance(made, Refused):
        return {"error": {"code": made.status, "message": made.message}}
    if isinstance(made, E.SandboxError):
        return {"error": {"code": http_status(made), "message": str(made)}}
    if isinstance(made, BaseException):
        log.error("a fork failed", exc_info=made)
        return {"error": {"code": 500, "message": f"the fork failed: {made}"}}
    return {"sandbox": made.created_json()}


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
        memory = body.get("memory") is not False
        if memory and (why := await no_memory(self.core, rec)):
            raise Refused(501, f"{why}; take it with mode='filesystem'")
        name = body.get("name") or ""
        if not isinstance(name, str) or len(name) > MAX_NAME:
            raise Refused(400, f"name must be a string of at most {MAX_NAME} characters")
        cp = await self.core.checkpoint(rec, name=name, ttl_s=None, memory=memory)
        return JSONResponse(snapshot_json(cp), status_code=201)

    async def fork(self, request: Request, owner: str) -> Response:
        body = await self.control._body(request)
        rec, source = await self.control.live(owner, request.path_params["sandbox_id"])
        count = body.get("count", 1)
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_FORKS:
            raise Refused(400, f"count must be an integer in [1, {MAX_FORKS}]")
        if why := await no_memory(self.core, rec):
            raise Refused(
                501,
                f"forking carries the sandbox's running processes: {why}; take a snapshot with "
                "mode='filesystem' and create sandboxes from it",
            )
        cp = await self.core.checkpoint(rec, ttl_s=None, memory=True)
        made = {
            "templateID": source.template_id,
            "metadata": dict(source.metadata),
            "envVars": dict(source.env),
            **({"timeout": body["timeout"]} if "timeout" in body else {}),
        }
        try:
            forks = await asyncio.gather(
                *(self.control.made(owner, made, snapshot_of=cp.id) for _ in range(count)),
                return_exceptions=True,
            )
        finally:
            # Each fork holds what it was made from; the snapshot itself is not the caller's to keep.
            with contextlib.suppress(E.NotFound):
                await self.core.delete_checkpoint(owner, cp.id)
        return JSONResponse([fork_result(f) for f in forks], status_code=201)

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
