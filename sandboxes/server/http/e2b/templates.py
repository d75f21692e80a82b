"""E2B templates: what `e2b`'s `Template` / `AsyncTemplate` send, over the server's built
templates (`built_templates.py`, `template_build.py`).

```
POST   /v3/templates                              202 {templateID, buildID, names, tags, aliases}
GET    /templates/{id}/files/{hash}               201 {present, url}: where to PUT the archive
PUT    /templates/{id}/files/{hash}/upload?token= 200 (the link's token, not the key)
POST   /v2/templates/{id}/builds/{buildID}        202: the build runs (steps, fromImage|fromTemplate)
GET    /templates/{id}/builds/{buildID}/status    200 {status, logEntries, logs, reason}
GET    /templates/{id}/builds/{buildID}/logs      200 {logs}
GET    /templates/aliases/{name[:tag]}            200 {templateID, public} / 404 (`exists`)
GET    /templates                                 [Template]
GET    /templates/{id}                            TemplateWithBuilds
DELETE /templates/{id}                            204 (a snapshot's id deletes the snapshot)
POST   /templates/tags   {target: name:tag, tags} 201 {buildID, tags}
DELETE /templates/tags   {name, tags}             204
GET    /templates/{id}/tags                       [{tag, buildID, createdAt}]
```

`Sandbox.create("name")`, `"name:tag"` or a template's id makes a sandbox from that build
(`api.py`). A base image names one of the server's templates as a create's image does
(`image_templates.py`); `fromTemplate` names a built template of the key or one of the
platform's (`base`, `code-interpreter-v1`). Private registries (`fromImageRegistry`) are refused:
the server pulls only what its engine can. `cpuCount` and `memoryMB` are recorded and reported;
the server's template caps are what the kernel enforces. A key sees only its own templates.
"""

from __future__ import annotations

import os
import tempfile
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from sandboxes import errors as E
from sandboxes.server.http.e2b.state import ENVD_VERSION
from sandboxes.server.http.endpoint import Refused
from sandboxes.server.http.timestamps import iso
from sandboxes.server.template_build import STEP_KINDS, BuildSpec, Step
from sandboxes.state.built_templates import Build, BuiltTemplate, split_ref

if TYPE_CHECKING:
    from sandboxes.server.http.e2b.api import ControlPlane, Handler

__all__ = ["Templates"]

MAX_UPLOAD_BYTES = 1 << 30
UPLOAD_ROUTE = "e2b_template_upload"
MAX_STEPS = 1000
LOG_PAGE = 100
MB = 1 << 20
# The platform's own templates, a base of any build (the server's default one runs them).
# What the platform adds to every template whose programs run as root, before its steps: the
# unprivileged `user` its SDK names (e2b's `Template.from_dockerfile` ends with `set_user("user")`),
# with a home, in the `sudo` group where the image has one. An image without `useradd` gets none.
PROVISION = (
    "if command -v useradd >/dev/null && ! id user >/dev/null 2>&1; then"
    " useradd -m -s /bin/bash user && { getent group sudo >/dev/null && usermod -aG sudo user || true; }; fi"
)
PLATFORM_TEMPLATES = frozenset({"base", "code-interpreter-v1", "code-interpreter"})


class Templates:
    """The template routes' handlers; `control` is the control plane."""

    def __init__(self, control: ControlPlane) -> None:
        self.control = control
        self.core = control.core

    def routes(self) -> list[tuple[str, Handler, str]]:
        return [
            ("/v3/templates", self.request, "POST"),
            ("/templates/aliases/{alias}", self.alias, "GET"),
            ("/templates/tags", self.assign_tags, "POST"),
            ("/templates/tags", self.remove_tags, "DELETE"),
            ("/templates", self.list, "GET"),
            ("/templates/{template_id}/files/{files_hash}", self.upload_link, "GET"),
            ("/v2/templates/{template_id}/builds/{build_id}", self.start, "POST"),
            ("/templates/{template_id}/builds/{build_id}/status", self.status, "GET"),
            ("/templates/{template_id}/builds/{build_id}/logs", self.logs, "GET"),
            ("/templates/{template_id}/tags", self.tags, "GET"),
            ("/templates/{template_id}", self.get, "GET"),
            ("/templates/{template_id}", self.delete, "DELETE"),
        ]

    def upload_route(self) -> Route:
        """The archive upload: authorized by the link's token (the SDK sends it without a key)."""
        return Route(
            "/templates/{template_id}/files/{files_hash}/upload",
            self.upload,
            methods=["PUT"],
            name=UPLOAD_ROUTE,
        )

    # -- builds ----------------------------------------------------------------------------------

    async def request(self, request: Request, owner: str) -> Response:
        body = await self.control._body(request)
        ref = body.get("name") or body.get("alias")
        if not isinstance(ref, str) or not ref:
            raise Refused(400, "name is required")
        tags = body.get("tags") or []
        if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
            raise Refused(400, "tags must be a list of strings")
        cpu, memory = body.get("cpuCount", 0), body.get("memoryMB", 0)
        for what, v in (("cpuCount", cpu), ("memoryMB", memory)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise Refused(400, f"{what} must be a non-negative integer")
        t, b = self.core.request_build(owner, ref, tags, cpu, memory)
        return JSONResponse(
            {
                "templateID": t.id,
                "buildID": b.id,
                "public": False,
                "names": [t.name],
                "aliases": [t.name],
                "tags": b.tags,
            },
            status_code=202,
        )

    async def upload_link(self, request: Request, owner: str) -> Response:
        t = self.core.built_template(owner, request.path_params["template_id"])
        digest = request.path_params["files_hash"]
        path = self.core.upload_path(t.id, digest)
        if path.exists():
            return JSONResponse({"present": True}, status_code=201)
        token = self.core.upload_token(t.id, digest)
        url = str(
            request.url_for(UPLOAD_ROUTE, template_id=t.id, files_hash=digest).include_query_params(
                token=token
            )
        )
        return JSONResponse({"present": False, "url": url}, status_code=201)

    async def upload(self, request: Request) -> Response:
        template_id, digest = request.path_params["template_id"], request.path_params["files_hash"]
        if not self.core.upload_ok(template_id, digest, request.query_params.get("token")):
            return JSONResponse({"code": 403, "message": "this upload link is not valid"}, status_code=403)
        if not self.core.built_template_exists(template_id):  # deleted since the link was handed out
            return JSONResponse(
                {"code": 404, "message": f"template {template_id} not found"}, status_code=404
            )
        try:
            path = self.core.upload_path(template_id, digest)
        except E.InvalidRequest as e:
            return JSONResponse({"code": 400, "message": e.message}, status_code=400)
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".", suffix=".part")
        size = 0
        try:
            with os.fdopen(fd, "wb") as f, self.core.uploading(template_id) as add:
                async for chunk in request.stream():
                    size += len(chunk)
                    if size > MAX_UPLOAD_BYTES:
                        msg = f"an archive is at most {MAX_UPLOAD_BYTES >> 20} MiB"
                        return JSONResponse({"code": 413, "message": msg}, status_code=413)
                    add(len(chunk))
                    f.write(chunk)
                os.replace(tmp, path)
        except E.QuotaExceeded as e:
            return JSONResponse({"code": 413, "message": e.message}, status_code=413)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return Response(status_code=200)

    async def start(self, request: Request, owner: str) -> Response:
        t = self.core.built_template(owner, request.path_params["template_id"])
        b = t.builds.get(request.path_params["build_id"])
        if b is None:
            raise Refused(404, f"build {request.path_params['build_id']!r} not found")
        if b.status != "waiting" or b.digest:
            raise Refused(400, f"build {b.id} was started already")
        body = await self.control._body(request)
        spec = await self._spec(owner, body)
        b.digest = spec.digest()  # started: a second start is refused
        self.core.start_build(t, b, spec)
        return Response(status_code=202)

    async def _spec(self, owner: str, body: dict[str, Any]) -> BuildSpec:
        if body.get("fromImageRegistry"):
            raise Refused(400, "private registries (fromImageRegistry) are not supported by this server")
        image, parent = body.get("fromImage"), body.get("fromTemplate")
        if (image is None) == (parent is None):
            raise Refused(400, "give exactly one of fromImage and fromTemplate")
        checkpoint, work_dir, base = None, "", ""
        if image is not None:
            if not isinstance(image, str) or not image:
                raise Refused(400, "fromImage must be an image name")
            template, _ = await self.core.image_template(image)
            base = f"image:{image}"
        elif not isinstance(parent, str) or not parent:
            raise Refused(400, "fromTemplate must be a template name")
        elif (found := self.core.ready_build(owner, parent)) is not None:
            _, pb = found
            checkpoint, work_dir, base = pb.checkpoint, pb.work_dir, f"build:{pb.digest}"
            template = self.core.checkpoint_of(owner, pb.checkpoint).template
        elif split_ref(parent)[0] in PLATFORM_TEMPLATES:
            template, _ = await self.core.image_template(None)
            base = f"template:{split_ref(parent)[0]}"
        else:
            raise Refused(404, f"template {parent!r} not found")
        steps = body.get("steps") or []
        if not isinstance(steps, list) or len(steps) > MAX_STEPS:
            raise Refused(400, f"steps must be a list of at most {MAX_STEPS}")
        tp = self.core.template(template)
        root = tp is not None and tp.user == "root"
        return BuildSpec(
            template=template,
            base=base,
            steps=tuple(_step(s) for s in steps),
            user="root" if root else "user",
            setup=PROVISION if root and checkpoint is None else "",
            checkpoint=checkpoint,
            work_dir=work_dir,
            start_cmd=_str(body.get("startCmd"), "startCmd"),
            ready_cmd=_str(body.get("readyCmd"), "readyCmd"),
            force=bool(body.get("force")),
        )

    def _build(self, owner: str, request: Request) -> tuple[BuiltTemplate, Build]:
        t = self.core.built_template(owner, request.path_params["template_id"])
        b = t.builds.get(request.path_params["build_id"])
        if b is None:
            raise Refused(404, f"build {request.path_params['build_id']!r} not found")
        return t, b

    async def status(self, request: Request, owner: str) -> Response:
        t, b = self._build(owner, request)
        offset = _int(request.query_params.get("logsOffset"), "logsOffset", 0)
        limit = min(_int(request.query_params.get("limit"), "limit", LOG_PAGE), LOG_PAGE)
        entries = b.logs[offset : offset + limit]
        body: dict[str, Any] = {
            "templateID": t.id,
            "buildID": b.id,
            "status": b.status,
            "logEntries": [_log_json(e) for e in entries],
            "logs": [e["message"] for e in entries],
        }
        if b.reason is not None:
            reason: dict[str, Any] = {"message": b.reason["message"]}
            if b.reason.get("step") is not None:
                reason["step"] = b.reason["step"]
            reason["logEntries"] = [_log_json(e) for e in b.logs if e["level"] == "error"][-LOG_PAGE:]
            body["reason"] = reason
        return JSONResponse(body)

    async def logs(self, request: Request, owner: str) -> Response:
        _, b = self._build(owner, request)
        offset = _int(request.query_params.get("cursor"), "cursor", 0)
        limit = min(_int(request.query_params.get("limit"), "limit", LOG_PAGE), 1000)
        return JSONResponse({"logs": [_log_json(e) for e in b.logs[offset : offset + limit]]})

    # -- templates -------------------------------------------------------------------------------

    async def alias(self, request: Request, owner: str) -> Response:
        # A name is registered with its first build request; a tag only once it names a ready build.
        ref = request.path_params["alias"]
        t = self.core.find_built(owner, ref)
        tag = split_ref(ref)[1]
        if t is None or (tag is not None and self.core.ready_build(owner, ref) is None):
            raise Refused(404, f"template {ref!r} not found")
        return JSONResponse({"templateID": t.id, "public": False})

    async def list(self, request: Request, owner: str) -> Response:
        return JSONResponse([_template_json(t) for t in self.core.built_templates(owner)])

    async def get(self, request: Request, owner: str) -> Response:
        t = self.core.built_template(owner, request.path_params["template_id"])
        builds = sorted(t.builds.values(), key=lambda b: b.created_at, reverse=True)
        return JSONResponse({**_template_json(t), "builds": [_build_json(t, b) for b in builds]})

    async def delete(self, request: Request, owner: str) -> Response:
        ref = request.path_params["template_id"]
        if self.core.find_built(owner, ref) is None:
            return await self.control.snapshots.delete(request, owner)
        await self.core.delete_built_template(owner, ref)
        return Response(status_code=204)

    # -- tags ------------------------------------------------------------------------------------

    async def assign_tags(self, request: Request, owner: str) -> Response:
        body = await self.control._body(request)
        target, tags = body.get("target"), _tags(body.get("tags"))
        if not isinstance(target, str) or ":" not in target:
            raise Refused(400, "target must be 'name:tag'")
        b = self.core.tag_build(owner, target, tags)
        return JSONResponse({"buildID": b.id, "tags": tags}, status_code=201)

    async def remove_tags(self, request: Request, owner: str) -> Response:
        body = await self.control._body(request)
        name, tags = body.get("name"), _tags(body.get("tags"))
        if not isinstance(name, str) or not name:
            raise Refused(400, "name is required")
        self.core.untag_build(owner, name, tags)
        return Response(status_code=204)

    async def tags(self, request: Request, owner: str) -> Response:
        t = self.core.built_template(owner, request.path_params["template_id"])
        return JSONResponse(
            [
                {"tag": tag, "buildID": build_id, "createdAt": iso(t.tagged_at.get(tag, t.created_at))}
                for tag, build_id in sorted(t.tag_map.items())
            ]
        )


def _step(s: Any) -> Step:
    if not isinstance(s, dict):
        raise Refused(400, "a step is an object {type, args}")
    kind = s.get("type")
    args = s.get("args") or []
    if not isinstance(kind, str) or kind.lower() not in STEP_KINDS:
        raise Refused(400, f"step type {kind!r} is not one of {', '.join(k.upper() for k in STEP_KINDS)}")
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise Refused(400, "a step's args are strings")
    kind = kind.lower()
    need = {"run": 1, "copy": 2, "env": 2, "workdir": 1, "user": 1}[kind]
    if len(args) < need or not args[0]:
        raise Refused(400, f"a {kind.upper()} step takes at least {need} argument(s)")
    files = s.get("filesHash") or ""
    if kind == "copy" and (not isinstance(files, str) or not files):
        raise Refused(400, "a COPY step needs the filesHash of its upload")
    return Step(
        kind=kind, args=tuple(args), files=files if kind == "copy" else "", force=bool(s.get("force"))
    )


def _str(value: Any, what: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise Refused(400, f"{what} must be a string")
    return value


def _int(value: str | None, what: str, default: int) -> int:
    if value is None:
        return default
    try:
        n = int(value)
    except ValueError:
        raise Refused(400, f"{what} must be an integer") from None
    if n < 0:
        raise Refused(400, f"{what} must not be negative")
    return n


def _tags(value: Any) -> list[str]:
    if not isinstance(value, list) or not value or not all(isinstance(t, str) for t in value):
        raise Refused(400, "tags must be a non-empty list of strings")
    return value


def _log_json(e: dict[str, Any]) -> dict[str, Any]:
    out = {"timestamp": iso(e["timestamp"]), "level": e["level"], "message": e["message"]}
    if "step" in e:
        out["step"] = e["step"]
    return out


def _template_json(t: BuiltTemplate) -> dict[str, Any]:
    b = t.build_of(None) or t.latest()
    return {
        "templateID": t.id,
        "buildID": b.id if b is not None else "",
        "cpuCount": t.cpu_count,
        "memoryMB": t.memory_mb,
        "diskSizeMB": 0,
        "public": False,
        "aliases": [t.name],
        "names": [t.name],
        "createdAt": iso(t.created_at),
        "updatedAt": iso(t.updated_at),
        "createdBy": None,
        "lastSpawnedAt": iso(t.last_spawned_at) if t.last_spawned_at else None,
        "spawnCount": t.spawn_count,
        "buildCount": len(t.builds),
        "envdVersion": ENVD_VERSION,
        "buildStatus": b.status if b is not None else "waiting",
    }


def _build_json(t: BuiltTemplate, b: Build) -> dict[str, Any]:
    out: dict[str, Any] = {
        "buildID": b.id,
        "status": b.status,
        "createdAt": iso(b.created_at),
        "updatedAt": iso(b.finished_at or b.created_at),
        "cpuCount": t.cpu_count,
        "memoryMB": t.memory_mb,
        "envdVersion": ENVD_VERSION,
    }
    if b.finished_at:
        out["finishedAt"] = iso(b.finished_at)
    return out
