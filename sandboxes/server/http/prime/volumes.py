"""The Prime Sandboxes API's volumes, `{base}/api/v1/sandbox/volumes...` and
`.../sandbox/{id}/volumes/{name}/publish`, over the server's volumes kept as versions
(`sandboxes.server.volume_versions`): what the SDK's `volumes.create / list / get / delete /
publish` send (the `prime sandbox volumes` commands), and `create` with `volumes` (`api.py`).

A sandbox gets a private copy of each volume it attaches, as its newest published version was at
its create; `publish` makes the sandbox's copy the newest version. A publish is whole when its call
returns: the checkpoint it answers is `DURABLE` at once. A key is one scope: `team_id` is accepted
and means nothing here. Another key's volume is the SDK's not-found.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from sandboxes import errors as E
from sandboxes.server.http.prime.checkpoints import IMAGE_LABEL, checkpoint_json
from sandboxes.server.http.prime.requests import parse_page
from sandboxes.server.http.timestamps import iso

if TYPE_CHECKING:
    from sandboxes.server.http.prime.api import ControlPlane, Handler
    from sandboxes.server.volume_versions import VersionedVolume

__all__ = ["Volumes"]

GIB = 1 << 30


class Volumes:
    """The volume routes' handlers; `control` is the control plane (its records and views)."""

    def __init__(self, control: ControlPlane) -> None:
        self.control = control
        self.core = control.core

    def routes(self) -> list[tuple[str, Handler, str]]:
        """(path, handler, method), before the control plane's `{sandbox_id}`."""
        return [
            ("/api/v1/sandbox/volumes", self.create, "POST"),
            ("/api/v1/sandbox/volumes", self.list, "GET"),
            ("/api/v1/sandbox/volumes/{name}", self.get, "GET"),
            ("/api/v1/sandbox/volumes/{name}", self.delete, "DELETE"),
            ("/api/v1/sandbox/{sandbox_id}/volumes/{name}/publish", self.publish, "POST"),
        ]

    def _limit_gb(self, owner: str) -> int | None:
        """The key's bound of checkpoint bytes (a volume's versions are checkpoints), in whole GiB."""
        limit = self.core.limits(owner).max_checkpoint_bytes
        return None if limit is None else limit // GIB

    def _json(self, v: VersionedVolume, owner: str | None = None) -> dict[str, Any]:
        """The SDK's `Volume`; with `owner`, the account's storage too (a single volume's GET)."""
        return {
            "id": v.id,
            "name": v.name,
            "user_id": None,
            "team_id": None,
            "head_checkpoint_id": v.head,
            "created_at": iso(v.created_at),
            "occupied_bytes": v.bytes,
            "account_storage_used_bytes": None if owner is None else self.core.versioned_bytes(owner),
            "account_storage_limit_gb": None if owner is None else self._limit_gb(owner),
        }

    async def create(self, request: Request, owner: str) -> Response:
        body = await self.control._body(request)
        if not isinstance(body, dict) or set(body) - {"name", "team_id"}:
            raise E.InvalidRequest("the body is {name, team_id}")
        name = body.get("name")  # one that is not a string is refused as an empty one is
        return JSONResponse(
            self._json(self.core.create_volume_version(owner, name if isinstance(name, str) else ""))
        )

    async def list(self, request: Request, owner: str) -> Response:
        page, per_page = parse_page(request.query_params)
        mine = self.core.versioned_volumes(owner)
        start = (page - 1) * per_page
        return JSONResponse(
            {
                "volumes": [self._json(v) for v in mine[start : start + per_page]],
                "total": len(mine),
                "page": page,
                "per_page": per_page,
                "has_next": start + per_page < len(mine),
                "storage_used_bytes": sum(v.bytes for v in mine),
                "storage_limit_gb": self._limit_gb(owner),
            }
        )

    async def get(self, request: Request, owner: str) -> Response:
        return JSONResponse(self._json(self.core.versioned_volume(owner, request.path_params["name"]), owner))

    async def delete(self, request: Request, owner: str) -> Response:
        await self.core.delete_volume_version(owner, request.path_params["name"])
        return JSONResponse({})

    async def publish(self, request: Request, owner: str) -> Response:
        body = await self.control._body(request)
        force = body.get("force", False) if isinstance(body, dict) else None
        if not isinstance(force, bool):
            raise E.InvalidRequest("the body is {force: bool}")
        rec, sb = await self.control._live(owner, request.path_params["sandbox_id"])
        cp = await self.core.publish_volume(
            rec, request.path_params["name"], force=force, labels={IMAGE_LABEL: sb.docker_image}
        )
        return JSONResponse(checkpoint_json(cp))
