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
of that image with no steps, one of a declarative image (`buildInfo`) a build of its Dockerfile's
steps (`dockerfile.py`), one of a sandbox its files checkpointed now (`includeMemory` is refused:
this server keeps files, not processes). The same templates are the E2B template API's and the
Prime API's `docker_image`. The server's own templates are the platform's general snapshots. A
create names one by `snapshot` (one that does not exist is the platform's 400); mounts name
volumes by id or name. A key sees only its own.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from sandboxes import errors as E
from sandboxes.server.http.daytona.dockerfile import declared
from sandboxes.server.http.daytona.fields import int_of
from sandboxes.server.http.daytona.state import DEFAULT_USER, ORGANIZATION
from sandboxes.server.http.endpoint import Refused
from sandboxes.server.http.timestamps import iso
from sandboxes.server.template_build import BuildSpec

if TYPE_CHECKING:
    from sandboxes.server.http.daytona.api import ControlPlane, Handler
    from sandboxes.state.built_templates import BuiltTemplate
    from sandboxes.state.volumes import Volume
    from sandboxes.templates import Template

__all__ = ["Images"]

# A build's status as a snapshot's state.
_STATES = {"waiting": "pending", "building": "building", "ready": "active", "error": "error"}


class Images:
    """The snapshot and volume routes' handlers; `control` is the control plane."""

    def __init__(self, control: ControlPlane) -> None:
        self.control = control
        self.core = control.core

    def routes(self) -> list[tuple[str, Handler, str]]:
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

    def _json(self, t: BuiltTemplate) -> dict[str, Any]:
        b = t.build_of(None) or t.latest()
        state = _STATES.get(b.status, "pending") if b is not None else "pending"
        tp = None
        if b is not None and b.checkpoint:
            try:
                tp = self.core.template(self.core.checkpoint_of(t.owner, b.checkpoint).template)
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
            **_resources(tp),
            "errorReason": (b.reason or {}).get("message") if b is not None else None,
            "createdAt": iso(t.created_at),
            "updatedAt": iso(t.updated_at),
            "lastUsedAt": iso(t.last_spawned_at) if t.last_spawned_at else None,
            "sourceSandboxId": None,
        }

    def exists(self, owner: str, ref: str) -> bool:
        """Whether `ref` names a snapshot `owner` may create from: one of the key's, or one of the
        server's templates (the platform's general snapshots)."""
        return self.core.find_built(owner, ref) is not None or ref in (self.core.templates() or ())

    async def build_spec(self, build_info: Any) -> BuildSpec:
        """The build of a declarative image: its `FROM` on the template that serves that image,
        then its steps and start command (`dockerfile.py`)."""
        d = declared(build_info)
        template, _ = await self.core.image_template(d.image)
        tp = self.core.template(template)
        user = "root" if tp is not None and tp.user == "root" else DEFAULT_USER
        return BuildSpec(
            template=template,
            base=f"image:{d.image}",
            steps=d.steps,
            user=user,
            start_cmd=d.start_cmd,
            keep_env=True,
        )

    def _general_json(self, name: str) -> dict[str, Any]:
        """One of the server's templates as the platform's general snapshots are shown."""
        tp = self.core.template(name)
        return {
            **_resources(tp),
            "id": name,
            "organizationId": ORGANIZATION,
            "general": True,
            "name": name,
            "imageName": name,
            "state": "active",
            "size": None,
            "entrypoint": None,
            "errorReason": None,
            "createdAt": iso(self.core.started_at),
            "updatedAt": iso(self.core.started_at),
            "lastUsedAt": None,
            "sourceSandboxId": None,
        }

    async def create(self, request: Request, owner: str) -> Response:
        body = await self.control._body(request)
        name = body.get("name")
        if not isinstance(name, str) or not name:
            raise Refused(400, "name is required")
        if int_of(body.get("gpu"), "gpu"):
            raise Refused(400, "GPUs are not available on this server")
        build_info = body.get("buildInfo")
        if build_info is None:
            image = body.get("imageName")
            if not isinstance(image, str) or not image:
                raise Refused(400, "imageName is required")
            build_info = {"dockerfileContent": f"FROM {image}"}
        spec = await self.build_spec(build_info)
        if self.core.find_built(owner, name) is not None:
            raise Refused(409, f"snapshot {name} already exists")
        t, b = self.core.request_build(owner, name, [], 0, 0)
        self.core.start_build(t, b, spec)
        return JSONResponse(self._json(t))

    async def list(self, request: Request, owner: str) -> Response:
        q = request.query_params
        page, limit = int_of(q.get("page") or 1, "page", low=1), int_of(q.get("limit") or 100, "limit", low=1)
        mine = self.core.built_templates(owner)
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
        ref = request.path_params["ref"]
        t = self.core.find_built(owner, ref)
        if t is not None:
            return JSONResponse(self._json(t))
        if ref in (self.core.templates() or ()):
            return JSONResponse(self._general_json(ref))
        raise Refused(404, f"Snapshot {ref} not found")

    async def delete(self, request: Request, owner: str) -> Response:
        if self.core.find_built(owner, request.path_params["ref"]) is None:
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
        if self.core.find_built(owner, name) is not None:
            raise Refused(409, f"snapshot {name} already exists")
        await self.core.template_from_sandbox(rec, name, sb.work_dir)
        return self.control._answer(request, sb)

    # -- volumes ---------------------------------------------------------------------------------

    @staticmethod
    def _volume_json(v: Volume) -> dict[str, Any]:
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


def _resources(tp: Template | None) -> dict[str, int]:
    """A snapshot's resources: its template's bounds (1 where it has none or is not known)."""
    return {
        "cpu": max(1, math.ceil(tp.cpu_quota)) if tp is not None and tp.cpu_quota else 1,
        "gpu": 0,
        "mem": max(1, int(tp.memory_bytes >> 30)) if tp is not None and tp.memory_bytes else 1,
        "disk": max(1, int(tp.disk_bytes >> 30)) if tp is not None and tp.disk_bytes else 1,
    }
