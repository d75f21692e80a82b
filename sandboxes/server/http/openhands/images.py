"""The OpenHands runtime API's image routes (OpenHands' V0 `RemoteRuntimeBuilder`), over the
templates a key builds on this server (`template_build.py`): an image of a runtime names one of
them (`name`, `name:tag`, any `registry/` prefix dropped) or any image the other APIs run.

```
GET  /registry_prefix            {registry_prefix}: what the client puts before its image names
GET  /image_exists?image=NAME    {exists, image: {name, upload_time, image_size_bytes}}: a ready build of the key's
POST /build  (multipart: context = base64 of a tar.gz holding a Dockerfile, target_image, tags...)
                                 {build_id, image}: the Dockerfile as a template build, in the background
GET  /build_status?build_id=ID   {build_id, status: PENDING|BUILDING|SUCCESS|FAILURE, image, error?}
```

The Dockerfile is read as Daytona's declarative images are (`daytona/dockerfile.py`): `FROM`,
`RUN`, `ENV`, `WORKDIR`, `USER`, `CMD` / `ENTRYPOINT`; `COPY` / `ADD` of the build context are
refused (400), as are other instructions: OpenHands' own runtime Dockerfile copies its code in,
so build such an image through the E2B template API (which takes files) and name it here.
"""

from __future__ import annotations

import base64
import binascii
import io
import tarfile
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from sandboxes.server.http.bodies import read_body
from sandboxes.server.http.daytona.dockerfile import declared
from sandboxes.server.http.endpoint import Refused
from sandboxes.server.http.timestamps import iso
from sandboxes.server.template_build import BuildSpec

if TYPE_CHECKING:
    from sandboxes.server.http.openhands import OpenHandsApi
    from sandboxes.state.built_templates import Build, BuiltTemplate

__all__ = ["REGISTRY_PREFIX", "Images"]

REGISTRY_PREFIX = "sandboxes"  # dropped again from the names the client makes with it
MAX_CONTEXT_BYTES = 16 << 20  # the whole multipart body
MAX_DOCKERFILE_BYTES = 1 << 20
_STATUS = {"waiting": "PENDING", "building": "BUILDING", "ready": "SUCCESS", "error": "FAILURE"}


class Images:
    """`routes()` of the image routes; `api` is the shared state (`OpenHandsApi`)."""

    def __init__(self, api: OpenHandsApi) -> None:
        self.api = api
        self.core = api.core

    def routes(self) -> list[Route]:
        r = self.api.runtimes.route
        return [
            r("/registry_prefix", self.registry_prefix, "GET"),
            r("/image_exists", self.image_exists, "GET"),
            r("/build", self.build, "POST"),
            r("/build_status", self.build_status, "GET"),
        ]

    async def registry_prefix(self, request: Request, owner: str) -> Response:
        return JSONResponse({"registry_prefix": REGISTRY_PREFIX})

    async def image_exists(self, request: Request, owner: str) -> Response:
        image = request.query_params.get("image")
        if not image:
            raise Refused(400, "image is required")
        found = self.core.ready_build(owner, image)
        if found is None:
            return JSONResponse({"exists": False, "image": None})
        t, b = found
        return JSONResponse(
            {
                "exists": True,
                "image": {
                    "name": image,
                    "upload_time": iso(b.finished_at or t.updated_at),
                    "image_size_bytes": 0,  # layers shared with their base: no size of its own
                },
            }
        )

    async def build(self, request: Request, owner: str) -> Response:
        data = await read_body(request, MAX_CONTEXT_BYTES)

        async def replay() -> dict[str, Any]:
            return {"type": "http.request", "body": data, "more_body": False}

        async with Request(request.scope, replay).form(max_files=1, max_fields=64) as form:
            target = form.get("target_image")
            tags = [t for t in form.getlist("tags") if isinstance(t, str)]
            part = form.get("context")
            raw = part if isinstance(part, str) else (await part.read() if part is not None else b"")
        if not isinstance(target, str) or not target:
            raise Refused(400, "target_image is required")
        dockerfile = _dockerfile(raw)
        d = declared({"dockerfileContent": dockerfile})
        template, _ = await self.core.image_template(d.image)
        tp = self.core.template(template)
        spec = BuildSpec(
            template=template,
            base=f"image:{d.image}",
            steps=d.steps,
            user="root" if tp is not None and tp.user == "root" else "openhands",
            start_cmd=d.start_cmd,
            keep_env=True,
        )
        extra = [t.rpartition(":")[2] for t in tags if ":" in t]
        t, b = self.core.request_build(owner, target, extra, 0, 0)
        self.core.start_build(t, b, spec)
        return JSONResponse({"build_id": b.id, "image": target}, status_code=201)

    async def build_status(self, request: Request, owner: str) -> Response:
        build_id = request.query_params.get("build_id")
        if not build_id:
            raise Refused(400, "build_id is required")
        found = self._find(owner, build_id)
        if found is None:
            raise Refused(404, f"Build {build_id} not found")
        t, b = found
        out: dict[str, Any] = {
            "build_id": b.id,
            "status": _STATUS.get(b.status, "BUILDING"),
            "image": f"{t.name}:{b.tags[0]}" if b.tags else t.name,
        }
        if b.status == "error":
            out["error"] = (b.reason or {}).get("message") or "the build failed"
        return JSONResponse(out)

    def _find(self, owner: str, build_id: str) -> tuple[BuiltTemplate, Build] | None:
        for t in self.core.built_templates(owner):
            b = t.builds.get(build_id)
            if b is not None:
                return t, b
        return None


def _dockerfile(raw: str | bytes) -> str:
    """The Dockerfile of a build context: base64 of a tar.gz (as the client sends it), or the
    tar.gz itself."""
    blob = raw.encode() if isinstance(raw, str) else raw
    try:
        blob = base64.b64decode(blob, validate=True)
    except (binascii.Error, ValueError):
        pass  # not base64: the archive itself
    try:
        with tarfile.open(fileobj=io.BytesIO(blob), mode="r:*") as tar:
            for m in tar.getmembers():
                if m.isfile() and m.name.lstrip("./") == "Dockerfile":
                    if m.size > MAX_DOCKERFILE_BYTES:
                        raise Refused(400, "the Dockerfile is too large")
                    f = tar.extractfile(m)
                    if f is not None:
                        return f.read().decode("utf-8", "replace")
    except (tarfile.TarError, EOFError, OSError) as e:
        raise Refused(400, f"context must be a tar.gz (base64) of the build context: {e}") from None
    raise Refused(400, "the build context has no Dockerfile at its top")
