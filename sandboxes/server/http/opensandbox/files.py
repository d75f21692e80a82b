"""execd's file system routes, on the agent's file calls (`FileVerbs` through a charged session:
stat, make dir, move, permissions, find; reads and writes of one file as the sandbox's own).

```
POST   /files/upload               multipart: a `metadata` part ({path, mode, owner, group}) before each `file` part
GET    /files/download?path        the file (Range: bytes=a-b -> 206; offset & limit: lines, 1-based)
GET    /files/info?path&path...    {path: FileInfo}
GET    /files/search?path&pattern  [FileInfo] of the files under path whose name matches the glob
DELETE /files?path...              removes files;  DELETE /directories?path...: trees
POST   /directories                {path: {mode, owner, group}}: made with their parents
GET    /directories/list?path&depth   [FileInfo]
POST   /files/mv                   [{src, dest}] (dest's parents made; an existing dest refused)
POST   /files/permissions          {path: {mode, owner, group}}
POST   /files/replace?verbose      {path: {old, new}} -> {path: {replacedCount}} when verbose
```

A `FileInfo` is execd's: `path`, `type` (file, directory, symlink, other), `size`, `mode` as
octal digits read as a number (0o644 is 644), `owner` and `group` names, `modified_at` and
`created_at` (the modification time: the agent reports no birth time). Modes given are read the
same way. Relative paths are under the sandbox's work dir. A missing path is 404 `FILE_NOT_FOUND`;
what the agent refuses is 500 `RUNTIME_ERROR` with its words, as execd answers an OS error.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from sandboxes import errors as E
from sandboxes.server.http.endpoint import Refused
from sandboxes.server.http.timestamps import iso

if TYPE_CHECKING:
    from sandboxes.server.http.opensandbox.execd import Execd
    from sandboxes.server.http.opensandbox.state import OpenSandbox
    from sandboxes.server.registry import Record
    from sandboxes.server.session import Session
    from sandboxes.types import DirEntry

__all__ = ["Files"]

METHOD = "opensandbox.files"  # what file calls are charged as
MAX_FILE_BYTES = 1 << 30
MAX_SEARCH_RESULTS = 10_000
_TYPES = {"file": "file", "dir": "directory", "symlink": "symlink"}
_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


def missing(path: str) -> Refused:
    return Refused(
        404, f"file not found. {path}: no such file or directory", fields={"code": "FILE_NOT_FOUND"}
    )


@contextlib.contextmanager
def file_errors(path: str) -> Iterator[None]:
    """The agent's typed errors as execd's: a missing path is `FILE_NOT_FOUND` (404), another
    refusal an OS error (500 `RUNTIME_ERROR`); the exec quota stays the server's error."""
    try:
        yield
    except E.NotFound:
        raise missing(path) from None
    except (E.QuotaExceeded, E.SandboxLost):
        raise
    except (E.InvalidRequest, E.AuthError, E.Conflict) as e:
        raise Refused(500, f"error accessing file: {e.message}", fields={"code": "RUNTIME_ERROR"}) from None


def file_info(e: DirEntry) -> dict[str, Any]:
    """The agent's entry as execd's `FileInfo`."""
    when = iso(e.mtime)
    return {
        "path": e.path,
        "type": _TYPES.get(e.type, "other"),
        "size": e.size,
        "modified_at": when,
        "created_at": when,
        "owner": e.owner or str(e.uid),
        "group": e.group or str(e.gid),
        "mode": int(f"{e.mode & 0o7777:o}"),
    }


def octal(mode: Any, what: str) -> int | None:
    """A mode as execd reads it (755 means 0o755); None for 0 or none."""
    if mode is None or mode == 0:
        return None
    if isinstance(mode, bool) or not isinstance(mode, int) or mode < 0 or any(c > "7" for c in str(mode)):
        raise Refused(
            400, f"{what}: mode must be octal digits, e.g. 644", fields={"code": "INVALID_REQUEST_BODY"}
        )
    return int(str(mode), 8)


def _permission(value: Any, path: str) -> tuple[int | None, str | None, str | None]:
    if not isinstance(value, dict):
        raise Refused(
            400, f"{path}: expected {{mode, owner, group}}", fields={"code": "INVALID_REQUEST_BODY"}
        )
    owner, group = value.get("owner") or None, value.get("group") or None
    if not all(v is None or isinstance(v, str) for v in (owner, group)):
        raise Refused(400, f"{path}: owner and group are names", fields={"code": "INVALID_REQUEST_BODY"})
    return octal(value.get("mode"), path), owner, group


class Files:
    """The file routes of execd (`execd` routes them to a sandbox)."""

    def __init__(self, execd: Execd) -> None:
        self.execd = execd
        self.core = execd.core

    def routes(self) -> list[tuple[str, Any, str]]:
        return [
            ("/files/upload", self.upload, "POST"),
            ("/files/download", self.download, "GET"),
            ("/files/info", self.info, "GET"),
            ("/files/search", self.search, "GET"),
            ("/files", self.remove_files, "DELETE"),
            ("/files/mv", self.move, "POST"),
            ("/files/permissions", self.chmod, "POST"),
            ("/files/replace", self.replace, "POST"),
            ("/directories", self.make_dirs, "POST"),
            ("/directories", self.remove_dirs, "DELETE"),
            ("/directories/list", self.list_dir, "GET"),
        ]

    def _files(self, rec: Record) -> Session:
        return self.core.session(rec, METHOD)

    async def _object(self, request: Request) -> dict[str, Any]:
        body = await self.execd.body(request)
        if not isinstance(body, dict):
            raise Refused(400, "the body must be a JSON object", fields={"code": "INVALID_REQUEST_BODY"})
        return body

    async def _apply(
        self, rec: Record, path: str, mode: int | None, owner: str | None, group: str | None
    ) -> None:
        if mode is not None or owner or group:
            with file_errors(path):
                await self._files(rec).set_permissions(path, mode=mode, owner=owner, group=group)

    # -- reads and writes ------------------------------------------------------------------------

    async def upload(self, request: Request, rec: Record, sb: OpenSandbox) -> Response:
        # Parts are spooled to disk by the form parser; each file is read and written on its own.
        form = await request.form(max_files=1000, max_fields=1000)
        try:
            metas, files = form.getlist("metadata"), form.getlist("file")
            if not metas:
                raise Refused(400, "metadata file is missing", fields={"code": "INVALID_FILE_METADATA"})
            if not files:
                raise Refused(400, "file is missing", fields={"code": "INVALID_FILE_CONTENT"})
            if len(metas) != len(files):
                raise Refused(
                    400,
                    f"metadata and file count mismatch: {len(metas)} vs {len(files)}",
                    fields={"code": "INVALID_FILE"},
                )
            for meta_part, part in zip(metas, files, strict=True):
                raw = meta_part if isinstance(meta_part, str) else await meta_part.read()
                try:
                    meta = json.loads(raw)
                except ValueError:
                    meta = None
                if not isinstance(meta, dict) or not isinstance(meta.get("path"), str) or not meta["path"]:
                    raise Refused(
                        400,
                        "invalid metadata: {path, ...} expected",
                        fields={"code": "INVALID_FILE_METADATA"},
                    )
                if isinstance(part, str):
                    raise Refused(400, "a file part must be a file", fields={"code": "INVALID_FILE_CONTENT"})
                if (part.size or 0) > MAX_FILE_BYTES:
                    raise Refused(
                        413, f"a file is at most {MAX_FILE_BYTES >> 20} MiB", fields={"code": "INVALID_FILE"}
                    )
                path = sb.resolve(meta["path"])
                mode, owner, group = _permission(meta, path)
                data = await part.read()
                with file_errors(path):
                    await rec.sandbox.write_files({path: (data, mode if mode is not None else 0o644)})
                await self._apply(rec, path, None, owner, group)
        finally:
            await form.close()
        return Response(status_code=200)

    async def download(self, request: Request, rec: Record, sb: OpenSandbox) -> Response:
        q = request.query_params
        path = sb.resolve(q.get("path"))
        with file_errors(path):
            data = await rec.sandbox.read_file(path, max_bytes=MAX_FILE_BYTES)
        if q.get("offset") or q.get("limit"):
            first = _whole(q.get("offset"), "offset", 1)
            count = _whole(q.get("limit"), "limit", 0)
            lines = data.splitlines(keepends=True)[first - 1 :]
            data = b"".join(lines[:count] if count else lines)
        headers = {
            "Content-Disposition": 'attachment; filename="' + path.rsplit("/", 1)[-1].replace('"', "") + '"'
        }
        rng = request.headers.get("range")
        if rng:
            m = _RANGE.match(rng.strip())
            if m is None or not (m.group(1) or m.group(2)):
                raise Refused(416, f"invalid range {rng!r}", fields={"code": "INVALID_REQUEST_BODY"})
            size = len(data)
            if m.group(1):
                start = int(m.group(1))
                end = min(int(m.group(2)), size - 1) if m.group(2) else size - 1
            else:
                start, end = max(0, size - int(m.group(2))), size - 1
            if start >= size or start > end:
                raise Refused(
                    416,
                    f"range {rng!r} is outside the file's {size} bytes",
                    fields={"code": "INVALID_REQUEST_BODY"},
                )
            headers["Content-Range"] = f"bytes {start}-{end}/{size}"
            return Response(
                data[start : end + 1], status_code=206, media_type="application/octet-stream", headers=headers
            )
        return Response(data, media_type="application/octet-stream", headers=headers)

    async def replace(self, request: Request, rec: Record, sb: OpenSandbox) -> Response:
        body = await self._object(request)
        results = {}
        for given, item in body.items():
            if (
                not isinstance(item, dict)
                or not isinstance(item.get("old"), str)
                or not isinstance(item.get("new", ""), str)
            ):
                raise Refused(400, f"{given}: expected {{old, new}}", fields={"code": "INVALID_REQUEST_BODY"})
            if not item["old"]:
                raise Refused(400, "old content must not be empty", fields={"code": "INVALID_REQUEST_BODY"})
            path = sb.resolve(given)
            old, new = item["old"].encode(), (item.get("new") or "").encode()
            with file_errors(path):
                entry = await self._files(rec).stat(path)
                data = await rec.sandbox.read_file(path, max_bytes=MAX_FILE_BYTES)
                await rec.sandbox.write_files({path: (data.replace(old, new), entry.mode & 0o7777)})
            results[given] = {"replacedCount": data.count(old)}
        if request.query_params.get("verbose") == "true":
            return JSONResponse(results)
        return Response(status_code=200)

    # -- entries ---------------------------------------------------------------------------------

    async def info(self, request: Request, rec: Record, sb: OpenSandbox) -> Response:
        out = {}
        for given in request.query_params.getlist("path"):
            path = sb.resolve(given)
            with file_errors(path):
                out[given] = file_info(await self._files(rec).stat(path))
        return JSONResponse(out)

    async def search(self, request: Request, rec: Record, sb: OpenSandbox) -> Response:
        q = request.query_params
        path = sb.resolve(q.get("path"))
        pattern = q.get("pattern") or "*"
        if pattern == "**":
            pattern = "*"
        files = self._files(rec)
        with file_errors(path):
            found = await files.find_files(path, pattern)
            entries = []
            for p in found[:MAX_SEARCH_RESULTS]:
                with contextlib.suppress(E.NotFound):  # gone since it was found
                    e = await files.stat(p)
                    if e.type != "dir":
                        entries.append(file_info(e))
        return JSONResponse(entries)

    async def list_dir(self, request: Request, rec: Record, sb: OpenSandbox) -> Response:
        q = request.query_params
        path = sb.resolve(q.get("path"))
        depth = _whole(q.get("depth"), "depth", 1)
        if depth == 0:
            return JSONResponse([])
        with file_errors(path):
            entry = await self._files(rec).stat(path)
            if entry.type != "dir":
                raise Refused(
                    400, f"path is not a directory: {path}", fields={"code": "INVALID_REQUEST_BODY"}
                )
            entries = await self._files(rec).list_dir(path, min(depth, 64))
        return JSONResponse([file_info(e) for e in entries])

    async def make_dirs(self, request: Request, rec: Record, sb: OpenSandbox) -> Response:
        for given, perm in (await self._object(request)).items():
            path = sb.resolve(given)
            mode, owner, group = _permission(perm, path)
            with file_errors(path):
                await self._files(rec).make_dir(path, mode=mode if mode is not None else 0o755, exist_ok=True)
            await self._apply(rec, path, None, owner, group)
        return Response(status_code=200)

    async def chmod(self, request: Request, rec: Record, sb: OpenSandbox) -> Response:
        for given, perm in (await self._object(request)).items():
            path = sb.resolve(given)
            await self._apply(rec, path, *_permission(perm, path))
        return Response(status_code=200)

    async def move(self, request: Request, rec: Record, sb: OpenSandbox) -> Response:
        items = await self.execd.body(request)
        if not isinstance(items, list) or not all(
            isinstance(i, dict) and isinstance(i.get("src"), str) and isinstance(i.get("dest"), str)
            for i in items
        ):
            raise Refused(400, "expected [{src, dest}]", fields={"code": "INVALID_REQUEST_BODY"})
        files = self._files(rec)
        for item in items:
            src, dest = sb.resolve(item["src"], "src"), sb.resolve(item["dest"], "dest")
            with contextlib.suppress(E.NotFound):
                await files.stat(dest)
                raise Refused(
                    500, f"destination path already exists: {item['dest']}", fields={"code": "RUNTIME_ERROR"}
                )
            with file_errors(src):
                await files.move(src, dest, make_parents=True)
        return Response(status_code=200)

    async def remove_files(self, request: Request, rec: Record, sb: OpenSandbox) -> Response:
        for given in request.query_params.getlist("path"):
            path = sb.resolve(given)
            with file_errors(path), contextlib.suppress(E.NotFound):  # a missing file is removed already
                await rec.sandbox.remove(path)
        return Response(status_code=200)

    async def remove_dirs(self, request: Request, rec: Record, sb: OpenSandbox) -> Response:
        for given in request.query_params.getlist("path"):
            path = sb.resolve(given)
            with file_errors(path), contextlib.suppress(E.NotFound):
                await rec.sandbox.remove(path, recursive=True)
        return Response(status_code=200)


def _whole(value: str | None, name: str, default: int) -> int:
    if not value:
        return default
    if not value.isdigit():
        raise Refused(
            400, f"invalid query parameter '{name}': {value}", fields={"code": "INVALID_REQUEST_BODY"}
        )
    return int(value)
