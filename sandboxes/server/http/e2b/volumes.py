"""E2B volumes over the core's volumes (`sandboxes.state.volumes`): what e2b's `Volume` sends.

```
POST   /volumes {name}          201 {volumeID, name, token}   (the key's; names unique per key)
GET    /volumes                 [{volumeID, name}]
GET    /volumes/{id}            {volumeID, name, token}       404 for a missing or another key's
DELETE /volumes/{id}            204 / 404
```

and the volume content API (`E2B_VOLUME_API_URL`, this port too), authorized by the volume's own
token (`Authorization: Bearer`), on the volume's files from the host (`sandboxes.state.volume_files`:
confined to the volume, symlinks never followed):

```
GET    /volumecontent/{id}/dir?path&depth               [VolumeEntryStat]
POST   /volumecontent/{id}/dir?path&uid&gid&mode&force  201 VolumeEntryStat (force: parents)
GET    /volumecontent/{id}/file?path                    the bytes
PUT    /volumecontent/{id}/file?path&uid&gid&mode&force 201 VolumeEntryStat (force: parents)
GET    /volumecontent/{id}/path?path                    VolumeEntryStat
PATCH  /volumecontent/{id}/path?path {uid, gid, mode}   VolumeEntryStat
DELETE /volumecontent/{id}/path?path                    204
```

A sandbox mounts volumes at create (`volumeMounts: [{name, path}]`, `api.py`). A volume's token is
an HMAC of its id under a key kept in the volume directory, so it outlives a restart. The file work
runs on the default thread pool; one key's volumes hold at most `THREADS_PER_KEY` of its threads at
once (the rest of that key's calls wait their turn), so no key can take the threads another's
calls need.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import os
import secrets
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from sandboxes import errors as E
from sandboxes.server.http.bodies import read_body
from sandboxes.server.http.endpoint import Envelope, Refused, code_body
from sandboxes.server.http.timestamps import iso
from sandboxes.state.volume_files import Entry, VolumeFiles

if TYPE_CHECKING:
    from sandboxes.server.http.e2b.api import ControlPlane, Handler
    from sandboxes.server.surface_core import SurfaceCore
    from sandboxes.state.volumes import Volume

__all__ = ["VolumeContent", "Volumes"]

ENVELOPE = Envelope("e2b", code_body)
MAX_FILE_BYTES = 256 << 20  # one read or write of the content API
MAX_BODY_BYTES = 1 << 20
DEFAULT_UID = DEFAULT_GID = 0
DEFAULT_FILE_MODE = 0o644
DEFAULT_DIR_MODE = 0o755
# The default thread pool has min(32, cores + 4) threads: 6 on 2 cores.
THREADS_PER_KEY = 2


def volume_json(vol: Volume, token: str | None = None) -> dict[str, Any]:
    out = {"volumeID": vol.id, "name": vol.name}
    if token is not None:
        out["token"] = token
    return out


def entry_json(e: Entry) -> dict[str, Any]:
    """The SDK's `VolumeEntryStat`."""
    out: dict[str, Any] = {
        "name": e.name,
        "type": e.type,
        "path": e.path,
        "size": e.size,
        "mode": e.mode,
        "uid": e.uid,
        "gid": e.gid,
        "atime": iso(e.atime),
        "mtime": iso(e.mtime),
        "ctime": iso(e.ctime),
    }
    if e.target is not None:
        out["target"] = e.target
    return out


class Tokens:
    """Each volume's content token: an HMAC of its id under a key kept in the volumes' directory
    (`root`)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._key: bytes | None = None

    def _load_key(self) -> bytes:
        if self._key is None:
            path = self.root / ".e2b-token-key"
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                pass
            else:
                with os.fdopen(fd, "wb") as f:
                    f.write(secrets.token_bytes(32))
            self._key = path.read_bytes()
        return self._key

    def of(self, volume_id: str) -> str:
        mac = hmac.new(self._load_key(), volume_id.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(mac).decode().rstrip("=")

    def ok(self, volume_id: str, header: str | None) -> bool:
        if not header or not header.lower().startswith("bearer "):
            return False
        return hmac.compare_digest(self.of(volume_id), header[7:].strip())


class Volumes:
    """The control plane's volume routes (keyed by `X-API-KEY` through `control`)."""

    def __init__(self, control: ControlPlane) -> None:
        self.control = control
        self.core = control.core
        self.tokens = Tokens(self.core.volumes_root())

    def routes(self) -> list[tuple[str, Handler, str]]:
        return [
            ("/volumes", self.create, "POST"),
            ("/volumes", self.list, "GET"),
            ("/volumes/{volume_id}", self.get, "GET"),
            ("/volumes/{volume_id}", self.delete, "DELETE"),
        ]

    async def _token(self, vol: Volume) -> str:
        return await asyncio.to_thread(self.tokens.of, vol.id)

    async def create(self, request: Request, owner: str) -> Response:
        body = await self.control._body(request)
        name = body.get("name")
        if not isinstance(name, str) or not name:
            raise Refused(400, "name is required")
        if any(v.name == name for v in self.core.volumes(owner)):
            raise Refused(409, f"a volume named {name!r} exists already")
        vol = await self.core.create_volume(owner, name)
        return JSONResponse(volume_json(vol, await self._token(vol)), status_code=201)

    async def list(self, request: Request, owner: str) -> Response:
        return JSONResponse([volume_json(v) for v in self.core.volumes(owner)])

    def _mine(self, owner: str, volume_id: str) -> Volume:
        try:
            return self.core.volume_of(owner, volume_id)
        except E.NotFound:
            raise Refused(404, f"volume {volume_id} not found") from None

    async def get(self, request: Request, owner: str) -> Response:
        vol = self._mine(owner, request.path_params["volume_id"])
        return JSONResponse(volume_json(vol, await self._token(vol)))

    async def delete(self, request: Request, owner: str) -> Response:
        vol = self._mine(owner, request.path_params["volume_id"])
        await self.core.delete_volume(owner, vol.id)
        return Response(status_code=204)


Op = Callable[[VolumeFiles], Any]


class VolumeContent:
    """The volume content API: each call mounts the volume (if no sandbox has it mounted) for as
    long as it runs."""

    def __init__(self, core: SurfaceCore, tokens: Tokens) -> None:
        self.core = core
        self.tokens = tokens
        self._threads: defaultdict[str, asyncio.Semaphore] = defaultdict(
            lambda: asyncio.Semaphore(THREADS_PER_KEY)
        )

    def routes(self) -> list[Route]:
        base = "/volumecontent/{volume_id}"
        return [
            Route(f"{base}/dir", ENVELOPE.guard(self.list), methods=["GET"]),
            Route(f"{base}/dir", ENVELOPE.guard(self.mkdir), methods=["POST"]),
            Route(f"{base}/file", ENVELOPE.guard(self.read), methods=["GET"]),
            Route(f"{base}/file", ENVELOPE.guard(self.write), methods=["PUT"]),
            Route(f"{base}/path", ENVELOPE.guard(self.stat), methods=["GET"]),
            Route(f"{base}/path", ENVELOPE.guard(self.update), methods=["PATCH"]),
            Route(f"{base}/path", ENVELOPE.guard(self.remove), methods=["DELETE"]),
        ]

    async def _on(self, request: Request, op: Op) -> Any:
        """`op` on the volume of the request, once its token is checked."""
        if self.core.draining:
            raise Refused(503, "server is shutting down")
        vid = request.path_params["volume_id"]
        if not await asyncio.to_thread(self.tokens.ok, vid, request.headers.get("authorization")):
            raise Refused(401, "missing or invalid token of this volume (Authorization: Bearer)")

        def run() -> Any:
            with self.core.volume_mounted(vid) as root:
                return op(VolumeFiles(root))

        try:
            owner = (await asyncio.to_thread(self.core.volume_by_id, vid)).owner
        except E.NotFound:
            raise Refused(404, f"volume {vid} not found") from None
        try:
            async with self._threads[owner]:
                return await asyncio.to_thread(run)
        except E.NotFound as e:
            raise Refused(404, e.message) from None

    @staticmethod
    def _path(request: Request) -> str:
        path = request.query_params.get("path")
        if not path:
            raise Refused(400, "path is required")
        return path

    @staticmethod
    def _int(request: Request, name: str, default: int) -> int:
        raw = request.query_params.get(name)
        if raw is None or raw == "":
            return default
        try:
            value = int(raw)
        except ValueError:
            raise Refused(400, f"{name} must be an integer") from None
        if not 0 <= value < (1 << 32):
            raise Refused(400, f"{name} is out of range")
        return value

    @staticmethod
    def _force(request: Request) -> bool:
        return (request.query_params.get("force") or "").lower() == "true"

    async def list(self, request: Request) -> Response:
        path, depth = self._path(request), self._int(request, "depth", 1)
        entries = await self._on(request, lambda f: f.list(path, depth))
        return JSONResponse([entry_json(e) for e in entries])

    async def mkdir(self, request: Request) -> Response:
        path, force = self._path(request), self._force(request)
        uid, gid = self._int(request, "uid", DEFAULT_UID), self._int(request, "gid", DEFAULT_GID)
        mode = self._int(request, "mode", DEFAULT_DIR_MODE) & 0o7777
        e = await self._on(request, lambda f: f.mkdir(path, uid=uid, gid=gid, mode=mode, parents=force))
        return JSONResponse(entry_json(e), status_code=201)

    async def read(self, request: Request) -> Response:
        path = self._path(request)
        data = await self._on(request, lambda f: f.read(path, MAX_FILE_BYTES))
        return Response(data, media_type="application/octet-stream")

    async def write(self, request: Request) -> Response:
        path, force = self._path(request), self._force(request)
        uid, gid = self._int(request, "uid", DEFAULT_UID), self._int(request, "gid", DEFAULT_GID)
        mode = self._int(request, "mode", DEFAULT_FILE_MODE) & 0o7777
        data = await read_body(request, MAX_FILE_BYTES)
        e = await self._on(request, lambda f: f.write(path, data, uid=uid, gid=gid, mode=mode, parents=force))
        return JSONResponse(entry_json(e), status_code=201)

    async def stat(self, request: Request) -> Response:
        path = self._path(request)
        return JSONResponse(entry_json(await self._on(request, lambda f: f.stat(path))))

    async def update(self, request: Request) -> Response:
        path = self._path(request)
        body = await ENVELOPE.json(request, MAX_BODY_BYTES)
        if not isinstance(body, dict):
            raise Refused(400, "the body must be a JSON object")
        fields = {k: body.get(k) for k in ("uid", "gid", "mode")}
        for k, v in fields.items():
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < (1 << 32)):
                raise Refused(400, f"{k} must be a non-negative integer")
        mode = fields["mode"] & 0o7777 if fields["mode"] is not None else None
        e = await self._on(request, lambda f: f.update(path, uid=fields["uid"], gid=fields["gid"], mode=mode))
        return JSONResponse(entry_json(e))

    async def remove(self, request: Request) -> Response:
        path = self._path(request)
        await self._on(request, lambda f: f.remove(path))
        return Response(status_code=204)
