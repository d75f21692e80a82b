"""The E2B in-sandbox daemon's HTTP side (the sandbox's port 49983) beside its Connect services:

```
GET  /health                   204
GET  /files?path=P             the file's bytes (404 missing, 400 not a regular file)
POST /files[?path=P]           multipart `file` parts (each part's filename is its path unless
                               `path` names the one file) or an octet-stream body (gzip allowed)
                               -> [{name, type: "file", path}]
POST /process.Process/<Method>, /filesystem.Filesystem/<Method>    Connect (`process.py`,
                               `filesystem.py`)
```

Errors are `{"code": <status>, "message": ...}` with the status the SDK maps: 404
(FileNotFoundException), 400 (InvalidArgumentException), 507 (NotEnoughSpaceException), 413.
Files are bounded by `MAX_FILE_BYTES` each.
"""

from __future__ import annotations

import posixpath
import zlib
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, Router

from sandboxes import errors as E
from sandboxes.server.http.bodies import BodyTooLarge, read_body
from sandboxes.server.http.e2b import filesystem, process
from sandboxes.server.http.e2b.process import TARGET
from sandboxes.server.http.endpoint import Envelope, Refused, code_body

if TYPE_CHECKING:
    from sandboxes.server.http.e2b.state import E2bSandbox
    from sandboxes.server.registry import Record

__all__ = ["ENVELOPE", "MAX_FILE_BYTES", "envd_app", "in_sandbox"]

MAX_FILE_BYTES = 256 << 20
MAX_FILES_PER_UPLOAD = 1000


ENVELOPE = Envelope("e2b envd", code_body)


def _user(request: Request, sb: E2bSandbox) -> str | None:
    """The user of the sandbox a call's `username` names (`E2bSandbox.user_of`)."""
    return sb.user_of(request.query_params.get("username"))


def in_sandbox(fn: Any, envelope: Envelope = ENVELOPE) -> Any:
    """The endpoint of `fn(request, record, sandbox)` for the sandbox in `TARGET`, its failures
    answered in `envelope`'s shape (the daemon's JSON errors by default). A sandbox that has
    ended says so as the platform's proxy does (the SDK then reports it as no longer running)."""

    async def call(request: Request) -> Response:
        rec, sb = TARGET.get()
        try:
            return await fn(request, rec, sb)
        except E.SandboxError as e:
            if envelope.failure(e)[0] == 502:
                raise Refused(502, f"The sandbox {sb.id} was not found: {e.message}") from None
            raise

    return envelope.guard(call)


async def _health(request: Request, rec: Record, sb: E2bSandbox) -> Response:
    return Response(status_code=204)


async def _read(request: Request, rec: Record, sb: E2bSandbox) -> Response:
    _user(request, sb)
    data = await rec.sandbox.read_file(sb.resolve(request.query_params.get("path")), max_bytes=MAX_FILE_BYTES)
    return Response(data, media_type="application/octet-stream")


async def _write(request: Request, rec: Record, sb: E2bSandbox) -> Response:
    user = _user(request, sb)
    declared = request.headers.get("content-length")
    content_type = request.headers.get("content-type", "")
    named = request.query_params.get("path")
    files: list[tuple[str, bytes]] = []
    if content_type.startswith("multipart/form-data"):
        if declared and declared.isdigit() and int(declared) > MAX_FILE_BYTES * 4:
            raise BodyTooLarge(MAX_FILE_BYTES * 4)
        async with request.form(max_files=MAX_FILES_PER_UPLOAD, max_fields=8, max_part_size=1 << 20) as form:
            parts = [p for _, p in form.multi_items() if not isinstance(p, str)]
            if not parts:
                raise Refused(400, "the multipart body needs `file` parts")
            for part in parts:
                data = await part.read(MAX_FILE_BYTES + 1)
                if len(data) > MAX_FILE_BYTES:
                    raise BodyTooLarge(MAX_FILE_BYTES)
                where = named if named and len(parts) == 1 else part.filename
                files.append((sb.resolve(where), data))
    else:
        data = await read_body(request, MAX_FILE_BYTES)
        if request.headers.get("content-encoding", "").lower() == "gzip":
            inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
            try:
                data = inflate.decompress(data, MAX_FILE_BYTES + 1)
            except zlib.error as e:
                raise Refused(400, f"the body is not valid gzip: {e}") from None
            if len(data) > MAX_FILE_BYTES:
                raise BodyTooLarge(MAX_FILE_BYTES)
        files.append((sb.resolve(named), data))
    await rec.sandbox.write_files({path: data for path, data in files}, user=user)
    return JSONResponse([{"name": posixpath.basename(p), "type": "file", "path": p} for p, _ in files])


def envd_app(proc: process.Process, fs: filesystem.Filesystem) -> Any:
    """The ASGI app of a sandbox's port 49983, for the sandbox in `TARGET`."""
    http = Router(
        routes=[
            Route("/health", in_sandbox(_health), methods=["GET"]),
            Route("/files", in_sandbox(_read), methods=["GET"]),
            Route("/files", in_sandbox(_write), methods=["POST"]),
        ]
    )
    services = {
        f"/{process.SERVICE}/": process.connect_app(proc),
        f"/{filesystem.SERVICE}/": filesystem.connect_app(fs),
    }

    async def app(scope: Any, receive: Any, send: Any) -> None:
        path = scope["path"]
        for prefix, service in services.items():
            if path.startswith(prefix):
                return await service(scope, receive, send)
        return await http(scope, receive, send)

    return app
