"""The Daytona control plane (`DAYTONA_API_URL` = this server's `/daytona`), over the server's
registry.

```
POST   /sandbox                         200 Sandbox (started: a create returns a running sandbox)
GET    /sandbox?cursor&limit&labels&states&name&id   {items, nextCursor}
GET    /sandbox/{id or name}            200 Sandbox
DELETE /sandbox/{id}                    200 Sandbox (destroyed)
POST   /sandbox/{id}/start | stop       200 Sandbox; stop keeps its files, start boots from them
PUT    /sandbox/{id}/labels             200 {labels}
POST   /sandbox/{id}/autostop|autoarchive|autodelete/{minutes}   200 Sandbox
POST   /sandbox/{id}/fork               200 Sandbox (a new sandbox of its files now)
GET    /sandbox/{id}/toolbox-proxy-url  {url}
GET    /sandbox/{id}/ports/{port}/preview-url   {sandboxId, url, token} (on the HTTP port)
```

Snapshots and volumes are `images.py`'s.

A create names a snapshot (a server template, a template built on this server, or an image) or
an image, chosen as for the other APIs (`image_templates.py`); a declarative image (`buildInfo`:
a Dockerfile of `RUN`, `ENV`, `WORKDIR`, ... after its `FROM`, `dockerfile.py`) is built into a
template of the key's first (`template_build.py`; the same Dockerfile again is that template). Resources are granted within the template's bounds, and the sandbox
reports what it got. `autoStopInterval` (15 minutes unless given, 0 never) stops a sandbox idle
that long (its files kept, as `stop`); with `autoDeleteInterval` 0 (an ephemeral sandbox) it is
deleted instead. It is the record's idle bound (`Registry.set_idle`), renewed by every toolbox
call (`toolbox.py`) and by `start`. `volumes` mount the key's volumes (by id or name). Refused with
the platform's error shapes (`{statusCode, message, error}`): GPUs, `COPY` in a declarative image, volume
subpaths, another `user` than the template's. A key sees only its own sandboxes;
another key's is 404.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from sandboxes import errors as E
from sandboxes.egress import EgressPolicy
from sandboxes.server.create import BuildNotReady, CreateSpec
from sandboxes.server.http.daytona.fields import image_of, int_of
from sandboxes.server.http.daytona.images import Images
from sandboxes.server.http.daytona.state import DEFAULT_USER, DaytonaSandbox
from sandboxes.server.http.endpoint import Envelope, Refused
from sandboxes.server.http.fields import str_map, volume_mounts

if TYPE_CHECKING:
    from sandboxes.server.http.daytona import DaytonaApi
    from sandboxes.server.registry import Record
    from sandboxes.state.built_templates import Build, BuiltTemplate

__all__ = ["ENVELOPE", "PREFIX", "ControlPlane", "error_body"]

PREFIX = "/daytona"
MAX_BODY_BYTES = 1 << 20
MAX_LABELS = 64
LIST_LIMIT = 100
MAX_LIST_LIMIT = 1000
GIB = 1 << 30
_REASONS = {400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found", 409: "Conflict"}


def error_body(status: int, message: str) -> dict[str, Any]:
    """The platform's error body (NestJS's): `{statusCode, message, error}`."""
    return {"statusCode": status, "message": message, "error": _REASONS.get(status, "Error")}


ENVELOPE = Envelope("daytona", error_body)
Handler = Callable[[Request, str], Awaitable[Response]]


class ControlPlane:
    """`routes()` of the REST API; `daytona` is the shared state (`DaytonaApi`)."""

    def __init__(self, daytona: DaytonaApi) -> None:
        self.daytona = daytona
        self.core = daytona.core
        self.images = Images(self)

    def routes(self) -> list[Route]:
        r = self._route
        return [
            r("/sandbox", self.create, "POST"),
            r("/sandbox", self.list, "GET"),
            r("/sandbox/{sandbox_id}", self.get, "GET"),
            r("/sandbox/{sandbox_id}", self.delete, "DELETE"),
            r("/sandbox/{sandbox_id}/start", self.start, "POST"),
            r("/sandbox/{sandbox_id}/stop", self.stop, "POST"),
            r("/sandbox/{sandbox_id}/labels", self.set_labels, "PUT"),
            r("/sandbox/{sandbox_id}/autostop/{minutes}", self.auto_stop, "POST"),
            r("/sandbox/{sandbox_id}/autoarchive/{minutes}", self.auto_archive, "POST"),
            r("/sandbox/{sandbox_id}/autodelete/{minutes}", self.auto_delete, "POST"),
            r("/sandbox/{sandbox_id}/fork", self.fork, "POST"),
            r("/sandbox/{sandbox_id}/toolbox-proxy-url", self.toolbox_url, "GET"),
            r("/sandbox/{sandbox_id}/ports/{port}/preview-url", self.preview_url, "GET"),
            *(r(path, fn, method) for path, fn, method in self.images.routes()),
        ]

    def _route(self, path: str, fn: Handler, method: str) -> Route:
        endpoint = ENVELOPE.keyed(fn, owner=self.daytona.owner, draining=lambda: self.core.draining)
        return Route(PREFIX + path, endpoint, methods=[method])

    async def _body(self, request: Request) -> dict[str, Any]:
        raw = await request.body()
        if not raw.strip():
            return {}
        if len(raw) > MAX_BODY_BYTES:
            raise Refused(413, "the body is too large")
        try:
            body = json.loads(raw)
        except ValueError:
            raise Refused(400, "the body must be JSON") from None
        if not isinstance(body, dict):
            raise Refused(400, "the body must be a JSON object")
        return body

    def _answer(self, request: Request, sb: DaytonaSandbox) -> JSONResponse:
        return JSONResponse(sb.to_json(self.daytona.toolbox_url(request)))

    async def live(self, owner: str, ref: str) -> tuple[Record, DaytonaSandbox]:
        """`owner`'s sandbox by id or name, with its state as the record has it."""
        rec = await self.core.find_record(ref, owner)
        if rec is None or "daytona" not in rec.attrs:
            rec = next(
                (
                    r
                    for r in self.core.records(owner)
                    if "daytona" in r.attrs and r.attrs["daytona"].name == ref
                ),
                None,
            )
        if rec is None:
            raise Refused(404, f"Sandbox with ID or name {ref} not found")
        return rec, _view(rec)

    # -- lifecycle ---------------------------------------------------------------------------

    async def create(self, request: Request, owner: str) -> Response:
        body = await self._body(request)
        if int_of(body.get("gpu"), "gpu") or body.get("gpuType"):
            raise Refused(400, "GPUs are not available on this server")
        if any(isinstance(m, dict) and m.get("subpath") for m in body.get("volumes") or []):
            raise Refused(400, "volume subpaths are not supported by this server")
        volumes = volume_mounts(
            self.core, owner, body.get("volumes"), volume="volumeId", path="mountPath", what="volumes"
        )
        image = image_of(body)
        if body.get("buildInfo") is None and image is not None and not self.images.exists(owner, image):
            # The platform's answer, which callers that fall back to building a snapshot wait for.
            raise Refused(400, f"Snapshot {image} not found. Did you add it through the Daytona Dashboard?")
        built = await self._declared(owner, body["buildInfo"]) if body.get("buildInfo") is not None else None
        name = body.get("name")
        if name is not None and (not isinstance(name, str) or not 0 < len(name) <= 128):
            raise Refused(400, "name must be a string of 1 to 128 characters")
        if name and any(
            r.attrs["daytona"].name == name for r in self.core.records(owner) if "daytona" in r.attrs
        ):
            raise Refused(409, f"Sandbox with name {name} already exists")
        env, labels = str_map(body.get("env"), "env"), str_map(body.get("labels"), "labels")
        if len(labels) > MAX_LABELS:
            raise Refused(400, f"at most {MAX_LABELS} labels")
        stop_min = int_of(body.get("autoStopInterval", 15), "autoStopInterval")
        delete_min = int_of(body.get("autoDeleteInterval", -1), "autoDeleteInterval", low=-1)
        archive_min = int_of(body.get("autoArchiveInterval", 7 * 24 * 60), "autoArchiveInterval")
        spec = CreateSpec(
            template=built[0].id if built is not None else None,
            image=image or None,
            env=env,
            labels=labels,
            volumes=volumes,
            network=_policy(body),
            idle_s=stop_min * 60.0 if stop_min else None,
            on_ttl="delete" if delete_min == 0 else "pause",
            pause_memory=delete_min == 0,
        )
        try:
            rec, source = await self.core.create(owner, spec)
        except BuildNotReady:
            raise Refused(400, f"Snapshot {image} is not active") from None
        except E.ImageUnavailable as e:
            raise Refused(400, f"image {image!r} could not be pulled: {e.message}") from None
        template, tp = rec.template, self.core.template_of(rec)
        user = "root" if tp.user == "root" else DEFAULT_USER
        if body.get("user") not in (None, user):
            await self.core.delete_record(rec, "create failed")
            raise Refused(400, f"user {body['user']!r} does not exist here: programs run as {user!r}")
        if source.build is not None:
            env = {**source.build.env, **env}  # a Dockerfile's ENV, under the create's own
        sb = DaytonaSandbox(
            id=rec.id,
            name=name or rec.id,
            template=template,
            snapshot=image or template,
            user=user,
            work_dir=(source.build.work_dir if source.build is not None else "") or tp.work_dir or "/work",
            env=env,
            labels=labels,
            cpu=max(1, math.ceil(tp.cpu_quota)) if tp.cpu_quota else 1,
            memory_gib=max(1, int(tp.memory_bytes // GIB)) if tp.memory_bytes else 1,
            disk_gib=max(1, int(tp.disk_bytes // GIB)) if tp.disk_bytes else 1,
            public=bool(body.get("public")),
            network_block_all=bool(body.get("networkBlockAll")),
            network_allow_list=body.get("networkAllowList"),
            auto_stop_min=stop_min,
            auto_archive_min=archive_min,
            auto_delete_min=delete_min,
        )
        rec.attrs["daytona"] = sb
        await self.core.save(rec)
        return self._answer(request, sb)

    async def _declared(self, owner: str, build_info: Any) -> tuple[BuiltTemplate, Build] | None:
        """The ready build of a declarative image (made now unless the key has it: the same
        Dockerfile is a cache hit), or None for a bare `FROM`."""
        spec = await self.images.build_spec(build_info)
        if not spec.steps and not spec.start_cmd:
            return None
        t, b = await self.core.build(owner, f"image-{spec.digest()[:20]}", spec)
        if b.status != "ready":
            raise Refused(400, f"the image's build failed: {(b.reason or {}).get('message', 'no reason')}")
        return t, b

    async def get(self, request: Request, owner: str) -> Response:
        _, sb = await self.live(owner, request.path_params["sandbox_id"])
        return self._answer(request, sb)

    async def list(self, request: Request, owner: str) -> Response:
        q = request.query_params
        labels = {}
        if q.get("labels"):
            try:
                labels = json.loads(q["labels"])
            except ValueError:
                raise Refused(400, "labels must be a JSON object") from None
            if not isinstance(labels, dict):
                raise Refused(400, "labels must be a JSON object")
        states = set(q.getlist("states"))
        limit = int_of(q.get("limit") or LIST_LIMIT, "limit", low=1)
        limit = min(limit, MAX_LIST_LIMIT)
        start = int_of(q.get("cursor") or 0, "cursor")
        views = []
        for rec in self.core.records(owner):
            if "daytona" not in rec.attrs:
                continue
            sb = _view(rec)
            if any(sb.labels.get(k) != v for k, v in labels.items()):
                continue
            if states and sb.state not in states:
                continue
            # `id` and `name` filter by prefix, without regard to case.
            if any(
                q.get(k) and not v.lower().startswith(q[k].lower())
                for k, v in (("id", sb.id), ("name", sb.name))
            ):
                continue
            views.append(sb)
        views.sort(key=lambda sb: (sb.created_at, sb.id), reverse=True)
        page = views[start : start + limit]
        more = start + limit < len(views)
        url = self.daytona.toolbox_url(request)
        return JSONResponse(
            {"items": [sb.to_json(url) for sb in page], "nextCursor": str(start + limit) if more else None}
        )

    async def delete(self, request: Request, owner: str) -> Response:
        rec, sb = await self.live(owner, request.path_params["sandbox_id"])
        await self.core.delete_record(rec, "delete")
        sb.touch("destroyed")
        return self._answer(request, sb)

    async def stop(self, request: Request, owner: str) -> Response:
        rec, sb = await self.live(owner, request.path_params["sandbox_id"])
        if sb.state == "started":
            # Its programs (terminals, sessions, kernels) end with it: `core.programs`.
            await self.core.pause(rec, memory=False)
        sb.touch("stopped")
        return self._answer(request, sb)

    async def start(self, request: Request, owner: str) -> Response:
        rec, sb = await self.live(owner, request.path_params["sandbox_id"])
        if sb.state == "stopped":
            await self.core.resume(rec, memory=False)  # activity: the auto-stop counts from now
            await self.core.save(rec)
        sb.touch("started")
        return self._answer(request, sb)

    async def set_labels(self, request: Request, owner: str) -> Response:
        _, sb = await self.live(owner, request.path_params["sandbox_id"])
        labels = str_map((await self._body(request)).get("labels"), "labels")
        if len(labels) > MAX_LABELS:
            raise Refused(400, f"at most {MAX_LABELS} labels")
        sb.labels = labels
        sb.touch()
        return JSONResponse({"labels": labels})

    async def auto_stop(self, request: Request, owner: str) -> Response:
        rec, sb = await self.live(owner, request.path_params["sandbox_id"])
        sb.auto_stop_min = int_of(request.path_params["minutes"], "autoStopInterval")
        self.core.set_idle(rec, sb.auto_stop_min * 60.0 or None)  # counted from now
        sb.touch()
        return self._answer(request, sb)

    async def auto_archive(self, request: Request, owner: str) -> Response:
        _, sb = await self.live(owner, request.path_params["sandbox_id"])
        sb.auto_archive_min = int_of(request.path_params["minutes"], "autoArchiveInterval")
        sb.touch()
        return self._answer(request, sb)

    async def auto_delete(self, request: Request, owner: str) -> Response:
        rec, sb = await self.live(owner, request.path_params["sandbox_id"])
        sb.auto_delete_min = int_of(request.path_params["minutes"], "autoDeleteInterval", low=-1)
        rec.on_ttl, rec.pause_memory = ("delete", True) if sb.auto_delete_min == 0 else ("pause", False)
        sb.touch()
        return self._answer(request, sb)

    async def fork(self, request: Request, owner: str) -> Response:
        rec, sb = await self.live(owner, request.path_params["sandbox_id"])
        name = (await self._body(request)).get("name")
        if name is not None and (not isinstance(name, str) or not 0 < len(name) <= 128):
            raise Refused(400, "name must be a string of 1 to 128 characters")
        (new,) = await self.core.fork(rec, 1, labels=dict(rec.labels), idle_s=sb.auto_stop_min * 60.0 or None)
        new.on_ttl, new.pause_memory = rec.on_ttl, rec.pause_memory
        copy = DaytonaSandbox(**{**sb.__dict__, "id": new.id, "name": name or new.id})
        copy.created_at = copy.updated_at = time.time()
        copy.state = "started"
        new.attrs["daytona"] = copy
        await self.core.save(new)
        return self._answer(request, copy)

    async def toolbox_url(self, request: Request, owner: str) -> Response:
        await self.live(owner, request.path_params["sandbox_id"])
        return JSONResponse({"url": self.daytona.toolbox_url(request)})

    async def preview_url(self, request: Request, owner: str) -> Response:
        rec, sb = await self.live(owner, request.path_params["sandbox_id"])
        port = int_of(request.path_params["port"], "port", low=1)
        url, _, token = self.core.port_access(rec, port)
        return JSONResponse({"sandboxId": sb.id, "url": url, "token": token})


def _view(rec: Record) -> DaytonaSandbox:
    """The API's view of `rec`, with its state as the record has it now (an auto-stop pauses it)."""
    sb: DaytonaSandbox = rec.attrs["daytona"]
    sb.state = "stopped" if rec.state == "paused" else "started"
    return sb


def _policy(body: dict[str, Any]) -> EgressPolicy | None:
    if body.get("networkBlockAll"):
        return EgressPolicy()
    allow = body.get("networkAllowList")
    if allow is None:
        return None
    if not isinstance(allow, str):
        raise Refused(400, "networkAllowList must be a comma-separated list of CIDRs")
    try:
        return EgressPolicy.of(allow=[a.strip() for a in allow.split(",") if a.strip()])
    except E.InvalidRequest as e:
        raise Refused(400, e.message) from None
