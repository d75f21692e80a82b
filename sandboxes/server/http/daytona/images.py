"""Daytona snapshots and volumes, over the server's built templates and volumes.

```
POST   /snapshots {name, imageName}      200 SnapshotDto (pending, then active once built)
GET    /snapshots?page&limit             {items, total, page, totalPages}
GET    /snapshots/{id or name}           SnapshotDto
DELETE /snapshots/{id}                   200
POST   /snapshots/{id}/activate          SnapshotDto
POST   /sandbox/{id}/snapshot {name}     200 Sandbox: a snapshot of its files now
POST   /volumes {name}                   200 VolumeDto (ready)
GET    /volumes, /volumes/by-name/{name} [VolumeDto], VolumeDto
DELETE /volumes/{id}                     200
```

A snapshot is a template built on this server (`built_templates.py`): one of an image is a build
of that image with no steps, one of a sandbox its files checkpointed now (`includeMemory` is
refused: this server keeps files, not processes). The same templates are the E2B template API's
and the Prime API's `docker_image`. A create names one by `snapshot`; mounts name volumes by id
or name. A key sees only its own.
"""

from __future__ import annotations

import math
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from sandboxes import errors as E
from sandboxes.server.http.daytona.fields import image_of, int_of
from sandboxes.server.http.daytona.state import ORGANIZATION
from sandboxes.server.http.endpoint import Refused
from sandboxes.server.http.timestamps import iso
from sandboxes.server.image_templates import template_for_image
from sandboxes.server.template_build import TEMPLATE_LABEL, BuildSpec

__all__ = ["Images"]

# A build's status as a snapshot's state.
_STATES = {"waiting": "pending", "building": "building", "ready": "active", "error": "error"}


class Images:
    """The snapshot and volume routes' handlers; `control` is the control plane."""

    def __init__(self, control: Any) -> None:
        self.control = control
        self.core = control.core
        self.store = control.core.built

    def routes(self) -> list[tuple[str, Any, str]]:
        return [
            ("/snapshots", self.create, "POST"),
            ("/snapshots", self.list, "GET"),
            ("/snapshots/{ref}", self.get, "GET"),
            ("/snapshots/{ref}", self.delete, "DELETE"),
            ("/snapshots/{ref}/activate", self.get, "POST"),
            ("/sandbox/{sandbox_id}/snapshot", self.of_sandbox, "POST"),
            ("/volumes", self.create_volume, "POST"),
            ("/volumes", self.volumes, "GET"),
            ("/volumes/by-name/{name}", self.volume, "GET"),
            ("/volumes/{ref}", self.delete_volume, "DELETE"),
        ]

    # -- snapshots -------------------------------------------------------------------------------

    def _json(self, t: Any) -> dict[str, Any]:
        b = t.build_of(None) or t.latest()
        state = _STATES.get(b.status, "pending") if b is not None else "pending"
        tp = None
        if b is not None and b.checkpoint:
            try:
                tp = self.core.pool.templates.get(self.core.checkpoint_of(t.owner, b.checkpoint).template)
            except E.NotFound:
                tp = None
        return {
            "id": t.id,
            "organizationId": ORGANIZATION,
            "general": False,
            "name": t.name,
            "imageName": t.name,
            "state": state,
            "size": None,
            "entrypoint": None,
            "cpu": max(1, math.ceil(tp.cpu_quota)) if tp is not None and tp.cpu_quota else 1,
            "gpu": 0,
            "mem": max(1, int(tp.memory_bytes >> 30)) if tp is not None and tp.memory_bytes else 1,
            "disk": max(1, int(tp.disk_bytes >> 30)) if tp is not None and tp.disk_bytes else 1,
            "errorReason": (b.reason or {}).get("message") if b is not None else None,
            "createdAt": iso(t.created_at),
            "updatedAt": iso(t.updated_at),
            "lastUsedAt": iso(t.last_spawned_at) if t.last_spawned_at else None,
            "sourceSandboxId": None,
        }

    async def create(self, request: Request, owner: str) -> Response:
        body = await self.control._body(request)
        name = body.get("name")
        if not isinstance(name, str) or not name:
            raise Refused(400, "name is required")
        if int_of(body.get("gpu"), "gpu"):
            raise Refused(400, "GPUs are not available on this server")
        image = image_of({"snapshot": body.get("imageName"), "buildInfo": body.get("buildInfo")})
        if image is None:
            raise Refused(400, "imageName is required")
        if self.store.find(owner, name) is not None:
            raise Refused(409, f"snapshot {name} already exists")
        template, _ = await template_for_image(self.core.pool, image)
        tp = self.core.pool.templates[template]
        t, b = self.store.request(owner, name, [], 0, 0)
        spec = BuildSpec(
            template=template, base=f"image:{image}", steps=(), user="root" if tp.user == "root" else "user"
        )
        self.core.builder.start(t, b, spec)
        return JSONResponse(self._json(t))

    async def list(self, request: Request, owner: str) -> Response:
        q = request.query_params
        page, limit = int_of(q.get("page") or 1, "page", low=1), int_of(q.get("limit") or 100, "limit", low=1)
        mine = self.store.of(owner)
        items = mine[(page - 1) * limit : page * limit]
        return JSONResponse(
            {
                "items": [self._json(t) for t in items],
                "total": len(mine),
                "page": page,
                "totalPages": max(1, math.ceil(len(mine) / limit)),
            }
        )

    async def get(self, request: Request, owner: str) -> Response:
        t = self.store.find(owner, request.path_params["ref"])
        if t is None:
            raise Refused(404, f"Snapshot {request.path_params['ref']} not found")
        return JSONResponse(self._json(t))

    async def delete(self, request: Request, owner: str) -> Response:
        if self.store.find(owner, request.path_params["ref"]) is None:
            raise Refused(404, f"Snapshot {request.path_params['ref']} not found")
        await self.core.delete_built_template(owner, request.path_params["ref"])
        return Response(status_code=200)

    async def of_sandbox(self, request: Request, owner: str) -> Response:
        rec, sb = await self.control.live(owner, request.path_params["sandbox_id"])
        body = await self.control._body(request)
        name = body.get("name")
        if not isinstance(name, str) or not name:
            raise Refused(400, "name is required")
        if body.get("includeMemory"):
            raise Refused(
                400, "memory snapshots are not available on this server: it keeps a sandbox's files"
            )
        if self.store.find(owner, name) is not None:
            raise Refused(409, f"snapshot {name} already exists")
        t, b = self.store.request(owner, name, [], 0, 0)
        try:
            cp = await self.core.checkpoint(rec, name=name, ttl_s=None, labels={TEMPLATE_LABEL: t.id})
        except BaseException:
            self.store.delete(owner, t.id)
            raise
        b.checkpoint, b.work_dir, b.status = cp.id, sb.work_dir, "ready"
        self.store.finish(t, b)
        return self.control._answer(request, sb)

    # -- volumes ---------------------------------------------------------------------------------

    @staticmethod
    def _volume_json(v: Any) -> dict[str, Any]:
        return {
            "id": v.id,
            "name": v.name,
            "organizationId": ORGANIZATION,
            "state": "ready",
            "createdAt": iso(v.created_at),
            "updatedAt": iso(v.created_at),
            "errorReason": None,
        }

    async def create_volume(self, request: Request, owner: str) -> Response:
        name = (await self.control._body(request)).get("name")
        if not isinstance(name, str) or not name:
            raise Refused(400, "name is required")
        return JSONResponse(self._volume_json(await self.core.create_volume(owner, name)))

    async def volumes(self, request: Request, owner: str) -> Response:
        return JSONResponse([self._volume_json(v) for v in self.core.volumes(owner)])

    async def volume(self, request: Request, owner: str) -> Response:
        name = request.path_params["name"]
        try:
            return JSONResponse(self._volume_json(self.core.volume_of(owner, name)))
        except E.NotFound:
            raise Refused(404, f"Volume with name {name} not found") from None

    async def delete_volume(self, request: Request, owner: str) -> Response:
        await self.core.delete_volume(owner, request.path_params["ref"])
        return Response(status_code=200)
