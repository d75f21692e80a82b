"""Daytona's toolbox (the in-sandbox daemon's API), at `{toolboxProxyUrl}/{sandbox id}/...` =
`/daytona/toolbox/{id}/...` on this server, with the key's `Authorization: Bearer`.

```
POST   /process/execute        {command, cwd, envs, timeout}  -> {result, exitCode} (both streams)
POST   /process/code-run       {code, language, argv, envs, timeout} -> {result, exitCode, artifacts}
POST   /process/session        {sessionId}; GET /process/session[/{id}]; DELETE /process/session/{id}
POST   /process/session/{id}/exec {command, runAsync} -> {cmdId[, exitCode, output, stdout, stderr]}
GET    /process/session/{id}/command/{cmd}[/logs]   (/logs?follow=true: a WebSocket)
GET    /files?path&depth, /files/info?path, DELETE /files?path&recursive
POST   /files/folder?path&mode, /files/move?source&destination, /files/permissions?path&mode&owner&group
GET    /files/find?path&pattern (contents), /files/search?path&pattern (names); POST /files/replace
POST   /files/bulk-upload (multipart files[i].path + files[i].file), /files/bulk-download {paths}
/process/interpreter/...   the code interpreter (`interpreter.py`)
/process/pty/...           pseudo-terminal sessions (`pty.py`)
```

A command runs with `/bin/sh -c` as the sandbox's one user, from its work dir (relative paths are
under it), its output both streams in order; past its `timeout` it is killed and the call is 408
`PROCESS_EXECUTION_TIMEOUT`. `code_run` runs Python (`python3 -c`), fresh each call: state is kept
only by sessions, as the platform documents. Listings, stats, folders, moves, permissions, finds
and searches are the agent's file operations (`FileVerbs`) on its path resolution, charged to the
key as executions are. Errors are the daemon's body (`{statusCode, message, code, source}`), whose `code`
the SDK turns into its typed errors (`FILE_NOT_FOUND`, ...). Every call is activity for the
sandbox's auto-stop (`ServerCore.touch`: its idle bound counts from the latest call).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import posixpath
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from sandboxes import errors as E
from sandboxes.server.http.daytona.api import PREFIX
from sandboxes.server.http.daytona.interpreter import CodeInterpreter
from sandboxes.server.http.daytona.pty import Ptys
from sandboxes.server.http.daytona.sessions import Sessions
from sandboxes.server.http.endpoint import Envelope, Refused
from sandboxes.server.http.fields import str_map
from sandboxes.server.http.timestamps import iso
from sandboxes.types import DirEntry, Limits

if TYPE_CHECKING:
    from sandboxes.server.http.daytona import DaytonaApi
    from sandboxes.server.http.daytona.state import DaytonaSandbox
    from sandboxes.server.registry import Record
    from sandboxes.server.session import Session

__all__ = ["Toolbox"]

DAEMON = "DAYTONA_DAEMON"
MAX_BODY_BYTES = 4 << 20
MAX_FILE_BYTES = 1 << 30
DEFAULT_TIMEOUT_S = 3600
LISTING_BYTES = 64 << 20
FOLLOW_POLL_S = 0.1  # how often a followed command's output is read while it runs
COMMAND_LIMITS = Limits(max_output_bytes=64 << 20)


def daemon_body(status: int, message: str) -> dict[str, Any]:
    return {"statusCode": status, "message": message, "source": DAEMON, "timestamp": iso(time.time())}


ENVELOPE = Envelope("daytona toolbox", daemon_body)


def missing(path: str) -> Refused:
    return Refused(404, f"file not found: {path}", fields={"code": "FILE_NOT_FOUND"})


@contextlib.contextmanager
def _file_errors(path: str) -> Iterator[None]:
    """A file operation's typed errors as the daemon's: a missing path is its `FILE_NOT_FOUND`,
    a file where a directory is wanted its `INVALID_FILE_PATH`, a refusal a 400 with the agent's
    words (the exec quota stays the server's error)."""
    try:
        yield
    except E.NotFound:
        raise missing(path) from None
    except E.QuotaExceeded:
        raise
    except (E.InvalidRequest, E.AuthError) as e:
        code = "INVALID_FILE_PATH" if "not a directory" in e.message.lower() else "FILE_OPERATION_FAILED"
        raise Refused(400, e.message, fields={"code": code}) from None


def file_info(e: DirEntry) -> dict[str, Any]:
    """The agent's entry as the daemon's `FileInfo`."""
    when = datetime.fromtimestamp(e.mtime, UTC).isoformat().replace("+00:00", "Z")
    return {
        "name": e.name,
        "isDir": e.is_dir,
        "size": e.size,
        "mode": e.symbolic_mode,
        "modTime": when,
        "permissions": f"{e.mode:04o}",
        "owner": e.owner,
        "group": e.group,
        "path": e.path,
        "modifiedAt": when,
    }


class Toolbox:
    """The toolbox routes; `daytona` is the shared state (`DaytonaApi`)."""

    def __init__(self, daytona: DaytonaApi) -> None:
        self.daytona = daytona
        self.core = daytona.core
        self.interpreter = CodeInterpreter(self)
        self.ptys = Ptys(self)

    def routes(self) -> list[Route]:
        r = self._route
        return [
            r("/process/execute", self.execute, "POST"),
            r("/process/code-run", self.code_run, "POST"),
            r("/process/session", self.create_session, "POST"),
            r("/process/session", self.list_sessions, "GET"),
            r("/process/session/{session_id}", self.get_session, "GET"),
            r("/process/session/{session_id}", self.delete_session, "DELETE"),
            r("/process/session/{session_id}/exec", self.session_exec, "POST"),
            r("/process/session/{session_id}/command/{command_id}", self.get_command, "GET"),
            r("/process/session/{session_id}/command/{command_id}/logs", self.command_logs, "GET"),
            r("/files", self.list_files, "GET"),
            r("/files", self.delete_file, "DELETE"),
            r("/files/info", self.file_info, "GET"),
            r("/files/folder", self.create_folder, "POST"),
            r("/files/move", self.move, "POST"),
            r("/files/permissions", self.permissions, "POST"),
            r("/files/find", self.find, "GET"),
            r("/files/search", self.search, "GET"),
            r("/files/replace", self.replace, "POST"),
            r("/files/bulk-upload", self.upload, "POST"),
            r("/files/bulk-download", self.download, "POST"),
            *(r(path, fn, method) for path, fn, method in self.interpreter.routes()),
            *(r(path, fn, method) for path, fn, method in self.ptys.routes()),
        ]

    async def target(
        self, conn: Request | WebSocket, owner: str | None = None
    ) -> tuple[Record, DaytonaSandbox]:
        """The started sandbox a call is for (its key's own); the call is its activity."""
        owner = self.daytona.owner(conn) if owner is None else owner
        rec, sb = await self.daytona.control.live(owner, conn.path_params["sandbox_id"])
        if sb.state != "started":
            raise Refused(409, f"sandbox {sb.id} is not started")
        self.core.touch(rec)  # activity: the auto-stop (its idle bound) counts from now
        return rec, sb

    def _route(self, path: str, fn: Any, method: str) -> Route:
        async def call(request: Request, owner: str) -> Response:
            rec, sb = await self.target(request, owner)
            return await fn(request, rec, sb)

        endpoint = ENVELOPE.keyed(call, owner=self.daytona.owner, draining=lambda: self.core.draining)
        return Route(f"{PREFIX}/toolbox/{{sandbox_id}}{path}", endpoint, methods=[method])

    async def _body(self, request: Request) -> dict[str, Any]:
        body = await ENVELOPE.json(request, MAX_BODY_BYTES)
        if not isinstance(body, dict):
            raise Refused(400, "the body must be a JSON object")
        return body

    @staticmethod
    def _path(sb: DaytonaSandbox, value: str | None, what: str = "path") -> str:
        if not isinstance(value, str) or not value or "\0" in value:
            raise Refused(400, f"{what} is required", fields={"code": "INVALID_FILE_PATH"})
        return posixpath.normpath(posixpath.join(sb.work_dir, value))

    # -- process -------------------------------------------------------------------------------

    async def _run(
        self, rec: Record, sb: DaytonaSandbox, argv: list[str], body: dict[str, Any]
    ) -> dict[str, Any]:
        timeout = body.get("timeout")
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int) or timeout < 0):
            raise Refused(400, "timeout must be a whole number of seconds")
        envs = str_map(body.get("envs"), "envs")
        cwd = self._path(sb, body["cwd"], "cwd") if body.get("cwd") else sb.work_dir
        # What the command leaves running (`nohup server &`) outlives it, as on the platform,
        # until it ends or the sandbox stops.
        r = await self.core.session(rec, "daytona.exec").exec(
            argv,
            env={**sb.env, **envs},
            cwd=cwd,
            timeout=timeout or DEFAULT_TIMEOUT_S,
            limits=COMMAND_LIMITS,
            keep_descendants=True,
        )
        if r.timed_out:
            raise Refused(
                408,
                f"the command did not finish within {timeout} s",
                fields={"code": "PROCESS_EXECUTION_TIMEOUT"},
            )
        return {"result": r.stdout.decode(errors="replace"), "exitCode": r.exit_code if not r.signal else -1}

    async def execute(self, request: Request, rec: Record, sb: DaytonaSandbox) -> Response:
        body = await self._body(request)
        command = body.get("command")
        if not isinstance(command, str) or not command:
            raise Refused(400, "command is required")
        # One stream, in order, as the platform's daemon answers it.
        return JSONResponse(await self._run(rec, sb, ["/bin/sh", "-c", "exec 2>&1\n" + command], body))

    async def code_run(self, request: Request, rec: Record, sb: DaytonaSandbox) -> Response:
        body = await self._body(request)
        code, language = body.get("code"), body.get("language") or "python"
        if not isinstance(code, str):
            raise Refused(400, "code is required")
        if language != "python":
            raise Refused(400, f"language {language!r} is not served here: python only")
        argv = body.get("argv") or []
        if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
            raise Refused(400, "argv must be a list of strings")
        script = 'exec 2>&1\nexec python3 -c "$0" "$@"'
        out = await self._run(rec, sb, ["/bin/sh", "-c", script, code, *argv], body)
        return JSONResponse({**out, "artifacts": {"stdout": out["result"], "charts": []}})

    # -- sessions ------------------------------------------------------------------------------

    def _sessions(self, rec: Record) -> Sessions:
        """`rec`'s sessions; none once its sandbox was stopped (they go with it: `core.programs`)."""
        return Sessions.of(self.core.programs(rec))

    async def create_session(self, request: Request, rec: Record, sb: DaytonaSandbox) -> Response:
        body = await self._body(request)
        await self._sessions(rec).create(body.get("sessionId") or "", sb.work_dir, sb.env)
        return Response(status_code=201)

    async def list_sessions(self, request: Request, rec: Record, sb: DaytonaSandbox) -> Response:
        return JSONResponse([s.to_json() for s in self._sessions(rec).by_id.values()])

    async def get_session(self, request: Request, rec: Record, sb: DaytonaSandbox) -> Response:
        return JSONResponse(self._sessions(rec).get(request.path_params["session_id"]).to_json())

    async def delete_session(self, request: Request, rec: Record, sb: DaytonaSandbox) -> Response:
        await self._sessions(rec).delete(request.path_params["session_id"])
        return Response(status_code=204)

    async def session_exec(self, request: Request, rec: Record, sb: DaytonaSandbox) -> Response:
        session = self._sessions(rec).get(request.path_params["session_id"])
        body = await self._body(request)
        command = body.get("command")
        if not isinstance(command, str) or not command:
            raise Refused(400, "command is required")
        release = self.core.session(rec, "daytona.session").hold()
        try:
            c = await session.run(command, release)
        except BaseException:
            release()
            raise
        if body.get("runAsync") or body.get("async"):
            return JSONResponse({"cmdId": c.id}, status_code=202)
        await c.done.wait()
        out, err = await session.logs(c)
        stdout, stderr = out.decode(errors="replace"), err.decode(errors="replace")
        return JSONResponse(
            {
                "cmdId": c.id,
                "exitCode": c.exit_code,
                "output": stdout + stderr,
                "stdout": stdout,
                "stderr": stderr,
            }
        )

    def _command(self, rec: Record, request: Request | WebSocket) -> tuple[Any, Any]:
        session = self._sessions(rec).get(request.path_params["session_id"])
        c = session.commands.get(request.path_params["command_id"])
        if c is None:
            raise Refused(404, f"command {request.path_params['command_id']} not found")
        return session, c

    async def get_command(self, request: Request, rec: Record, sb: DaytonaSandbox) -> Response:
        return JSONResponse(self._command(rec, request)[1].to_json())

    def websocket_routes(self) -> list[WebSocketRoute]:
        path = f"{PREFIX}/toolbox/{{sandbox_id}}/process/session/{{session_id}}/command/{{command_id}}/logs"
        return [
            WebSocketRoute(path, self.follow_logs),
            *self.interpreter.websocket_routes(),
            *self.ptys.websocket_routes(),
        ]

    async def follow_logs(self, ws: WebSocket) -> None:
        """`logs?follow=true` as a WebSocket: what the command prints, each chunk behind its
        stream's marker (`\\x01\\x01\\x01` stdout, `\\x02\\x02\\x02` stderr), closed (1000) once
        it has ended and everything it printed is sent."""
        try:
            rec, _ = await self.target(ws)
            session, c = self._command(rec, ws)
        except (E.SandboxError, Refused):
            await ws.close(code=1008)  # before the handshake: the upgrade is refused (403)
            return
        await ws.accept()
        offsets = {"stdout": 0, "stderr": 0}
        try:
            while True:
                ended = c.done.is_set()
                for stream, marker in (("stdout", b"\x01\x01\x01"), ("stderr", b"\x02\x02\x02")):
                    data = await session.read(c, stream, offsets[stream])
                    if data:
                        offsets[stream] += len(data)
                        await ws.send_bytes(marker + data)
                if ended:
                    break
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(c.done.wait(), FOLLOW_POLL_S)
            await ws.close(code=1000)
        except (WebSocketDisconnect, RuntimeError, E.SandboxError):
            pass  # the client went away, or the sandbox did

    async def command_logs(self, request: Request, rec: Record, sb: DaytonaSandbox) -> Response:
        session, c = self._command(rec, request)
        out, err = await session.logs(c)
        stdout, stderr = out.decode(errors="replace"), err.decode(errors="replace")
        return JSONResponse({"output": stdout + stderr, "stdout": stdout, "stderr": stderr})

    # -- files -----------------------------------------------------------------------------------

    def _files(self, rec: Record) -> Session:
        """The charged session the file calls run in."""
        return self.core.session(rec, "daytona.files")

    async def list_files(self, request: Request, rec: Record, sb: DaytonaSandbox) -> Response:
        depth = int(request.query_params.get("depth") or 1)
        if not 1 <= depth <= 64:
            raise Refused(400, "depth must be 1 to 64")
        path = self._path(sb, request.query_params.get("path") or ".")
        with _file_errors(path):
            entries = await self._files(rec).list_dir(path, depth)
        return JSONResponse([file_info(e) for e in entries])

    async def file_info(self, request: Request, rec: Record, sb: DaytonaSandbox) -> Response:
        path = self._path(sb, request.query_params.get("path"))
        with _file_errors(path):
            return JSONResponse(file_info(await self._files(rec).stat(path)))

    async def delete_file(self, request: Request, rec: Record, sb: DaytonaSandbox) -> Response:
        path = self._path(sb, request.query_params.get("path"))
        try:
            await rec.sandbox.remove(path, recursive=request.query_params.get("recursive") == "true")
        except E.NotFound:
            raise missing(path) from None
        return Response(status_code=204)

    async def create_folder(self, request: Request, rec: Record, sb: DaytonaSandbox) -> Response:
        path = self._path(sb, request.query_params.get("path"))
        mode = request.query_params.get("mode") or "755"
        if not mode.isdigit() or len(mode) > 4 or any(c > "7" for c in mode):
            raise Refused(400, "mode must be octal, e.g. 755")
        with _file_errors(path):
            await self._files(rec).make_dir(path, mode=int(mode, 8), exist_ok=True)
        return Response(status_code=201)

    async def move(self, request: Request, rec: Record, sb: DaytonaSandbox) -> Response:
        q = request.query_params
        source, dest = (
            self._path(sb, q.get("source"), "source"),
            self._path(sb, q.get("destination"), "destination"),
        )
        with _file_errors(source):
            await self._files(rec).move(source, dest, into_directory=True)
        return Response(status_code=200)

    async def permissions(self, request: Request, rec: Record, sb: DaytonaSandbox) -> Response:
        q = request.query_params
        path = self._path(sb, q.get("path"))
        mode, owner, group = q.get("mode") or "", q.get("owner") or "", q.get("group") or ""
        if mode and (not mode.isdigit() or len(mode) > 4 or any(c > "7" for c in mode)):
            raise Refused(400, "mode must be octal, e.g. 644")
        with _file_errors(path):
            await self._files(rec).set_permissions(
                path, mode=int(mode, 8) if mode else None, owner=owner or None, group=group or None
            )
        return Response(status_code=200)

    async def find(self, request: Request, rec: Record, sb: DaytonaSandbox) -> Response:
        """Lines that contain `pattern`, under `path` (grep)."""
        q = request.query_params
        path, pattern = self._path(sb, q.get("path")), q.get("pattern") or ""
        if not pattern:
            raise Refused(400, "pattern is required")
        with _file_errors(path):
            found = await self._files(rec).search_files(path, pattern)
        return JSONResponse([{"file": m.path, "line": m.line, "content": m.content} for m in found])

    async def search(self, request: Request, rec: Record, sb: DaytonaSandbox) -> Response:
        """Files whose name matches the glob `pattern`, under `path`."""
        q = request.query_params
        path, pattern = self._path(sb, q.get("path")), q.get("pattern") or ""
        if not pattern:
            raise Refused(400, "pattern is required")
        with _file_errors(path):
            return JSONResponse({"files": await self._files(rec).find_files(path, pattern)})

    async def replace(self, request: Request, rec: Record, sb: DaytonaSandbox) -> Response:
        body = await self._body(request)
        files, pattern, new = body.get("files"), body.get("pattern"), body.get("newValue")
        if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
            raise Refused(400, "files must be a list of paths")
        if not isinstance(pattern, str) or not pattern or not isinstance(new, str):
            raise Refused(400, "pattern and newValue are required strings")
        results = []
        for f in files:
            path = self._path(sb, f)
            try:
                data = await rec.sandbox.read_file(path, max_bytes=MAX_FILE_BYTES)
                await rec.sandbox.write_file(path, data.replace(pattern.encode(), new.encode()))
                results.append({"file": f, "success": True})
            except E.SandboxError as e:
                results.append({"file": f, "success": False, "error": e.message})
        return JSONResponse(results)

    async def upload(self, request: Request, rec: Record, sb: DaytonaSandbox) -> Response:
        # Parts are spooled to disk by the form parser; each file is read and written on its own.
        form = await request.form(max_files=1000, max_fields=1000)
        written = []
        try:
            paths = {k[len("files[") : -len("].path")]: v for k, v in form.items() if k.endswith("].path")}
            if not paths:
                raise Refused(400, "no files[i].path / files[i].file parts")
            for key, dest in paths.items():
                part = form.get(f"files[{key}].file")
                if part is None or isinstance(part, str) or not isinstance(dest, str):
                    raise Refused(400, f"files[{key}] has no file")
                if (part.size or 0) > MAX_FILE_BYTES:
                    raise Refused(413, f"a file is at most {MAX_FILE_BYTES >> 20} MiB")
                path = self._path(sb, dest)
                data = await part.read()
                await rec.sandbox.write_files({path: data})
                written.append({"path": path, "bytes": len(data)})
        finally:
            await form.close()
        return JSONResponse({"files": written})

    async def download(self, request: Request, rec: Record, sb: DaytonaSandbox) -> Response:
        body = await self._body(request)
        paths = body.get("paths")
        if not isinstance(paths, list) or not paths or not all(isinstance(p, str) for p in paths):
            raise Refused(400, "paths must be a non-empty list of paths")
        boundary = uuid.uuid4().hex
        # One part per file, each read when its turn comes (one file in memory at a time).
        return StreamingResponse(
            self._parts(rec, sb, list(dict.fromkeys(paths)), boundary),
            media_type=f"multipart/form-data; boundary={boundary}",
        )

    async def _parts(
        self, rec: Record, sb: DaytonaSandbox, paths: list[str], boundary: str
    ) -> AsyncIterator[bytes]:
        for p in paths:
            name = json.dumps(p, ensure_ascii=False)  # quoted, escaped: the SDK reads back the path as given
            try:
                data = await rec.sandbox.read_file(self._path(sb, p), max_bytes=MAX_FILE_BYTES)
                head = f'Content-Disposition: form-data; name="file"; filename={name}\r\n'
                head += "Content-Type: application/octet-stream\r\n"
            except (E.SandboxError, Refused) as e:
                status, code = (
                    (404, "FILE_NOT_FOUND") if isinstance(e, E.NotFound) else (400, "FILE_READ_FAILED")
                )
                data = json.dumps({**daemon_body(status, e.message), "code": code}).encode()
                head = f'Content-Disposition: form-data; name="error"; filename={name}\r\n'
                head += "Content-Type: application/json\r\n"
            yield f"--{boundary}\r\n{head}\r\n".encode()
            yield data
            yield b"\r\n"
        yield f"--{boundary}--\r\n".encode()
