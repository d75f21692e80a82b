"""The per-sandbox gateway of the Prime Sandboxes API: `{gateway_url}/{user_ns}/{job_id}/...`.

`POST .../auth` hands out `gateway_url` (this server's own address, as the client reached it,
plus `/gateway`), `user_ns`, `job_id` (the sandbox id) and a token of that sandbox alone
(`Authorization: Bearer`, checked in constant time, expiring). Behind it:

```
POST .../upload?path=P        multipart `file` -> {success, path, size, timestamp}
GET  .../download?path=P      the file's bytes
GET  .../read-file?path=P&offset=O&length=N   {content, size, total_size, offset, truncated}
                              (a negative offset counts from the end; 404 missing, 413 too large)
POST .../exec                 {command, working_dir, env, timeout, user} -> {stdout, stderr,
                              exit_code} (older SDKs; 408 at the timeout)
POST .../command_session.CommandSession/<Method>    Connect (`sessions.py`)
```

A wrong or expired token is 401 (the SDK fetches a new one and retries once); a sandbox that has
ended answers 410 `{"error": "sandbox_terminated"}` (the REST exec: 502 `sandbox_not_found`;
Connect: `not_found`), which the SDK turns into `SandboxNotRunningError` after reading the error
context.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from connectrpc.code import Code
from connectrpc.errors import ConnectError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route, Router

from sandboxes import errors as E
from sandboxes.server.http.bodies import BodyTooLarge
from sandboxes.server.http.endpoint import Envelope, Refused, detail_body
from sandboxes.server.http.prime.sessions import COMMAND_LIMITS, SERVICE, TARGET, Sessions, sessions_app
from sandboxes.server.http.prime.state import PrimeSandbox
from sandboxes.server.http.timestamps import iso

if TYPE_CHECKING:
    from sandboxes.server.http.prime import PrimeApi
    from sandboxes.server.registry import Record

__all__ = ["Gateway"]

MAX_UPLOAD_BYTES = 1 << 30
MAX_READ_FILE_BYTES = 32 << 20  # read-file answers JSON text; download has the larger bound
MAX_DOWNLOAD_BYTES = 1 << 30
EXEC_BODY_BYTES = 4 << 20
DEFAULT_EXEC_TIMEOUT_S = 300.0
MAX_EXEC_TIMEOUT_S = 24 * 3600.0


# An ended sandbox: the file calls answer 410 `sandbox_terminated`, the REST exec of older SDKs
# 502 `sandbox_not_found`; each is what that client turns into `SandboxNotRunningError`.
_GONE = (410, "sandbox_terminated")
_GONE_EXEC = (502, "sandbox_not_found")


# The gateway's errors are FastAPI's `{"detail": ...}`; a failure behind it is 502.
ENVELOPE = Envelope("prime gateway", detail_body, other=502)

Handler = Callable[[Request, "Record", PrimeSandbox], Awaitable[Response]]


class Gateway:
    def __init__(self, prime: PrimeApi) -> None:
        self.prime = prime
        self.core = prime.core
        self.connect_app = sessions_app(Sessions(prime.core))

    def routes(self) -> list[Mount]:
        inner = Router(
            routes=[
                Route("/upload", self._wrap(self.upload), methods=["POST"]),
                Route("/download", self._wrap(self.download), methods=["GET"]),
                Route("/read-file", self._wrap(self.read_file), methods=["GET"]),
                Route("/exec", self._wrap(self.exec, gone=_GONE_EXEC), methods=["POST"]),
                Mount(f"/{SERVICE}", app=self._connect),
            ]
        )
        return [Mount("/gateway/{user_ns}/{job_id}", app=inner)]

    # -- access ------------------------------------------------------------------------------

    async def _resolve(self, sandbox_id: str, authorization: str | None) -> tuple[Record, PrimeSandbox]:
        """(record, PrimeSandbox) of a live sandbox whose token the caller holds; else `Refused`
        (410 for an ended sandbox whose token it was)."""
        scheme, _, token = (authorization or "").strip().partition(" ")
        if scheme.lower() != "bearer" or not token:
            raise Refused(401, "missing gateway token: send `Authorization: Bearer <token>`")
        rec = await self.core.find_record(sandbox_id)
        sb = rec.attrs.get("prime") if rec is not None else None
        if rec is not None and sb is not None and sb.token_ok(token.strip()):
            self.core.touch(rec)  # activity: its idle timeout counts from now
            return rec, sb
        ended = self.prime.tombstones.get(sandbox_id)
        if ended is not None and ended.token_ok(token.strip()):
            raise Refused(410, f"sandbox {sandbox_id} has ended")
        raise Refused(401, "invalid or expired gateway token")

    def _wrap(self, fn: Handler, gone: tuple[int, str] = _GONE) -> Callable[[Request], Awaitable[Response]]:
        """`fn(request, record, sandbox)` behind the token check, its errors as HTTP statuses;
        `gone` is how an ended sandbox is answered (status, `error`)."""

        async def call(request: Request) -> Response:
            try:
                rec, sb = await self._resolve(
                    request.path_params["job_id"], request.headers.get("authorization")
                )
                return await fn(request, rec, sb)
            except Refused as r:
                if r.status != 410:
                    raise
                message = r.message
            except (E.SandboxLost, E.Cancelled) as e:
                message = e.message
            raise Refused(gone[0], message, fields={"error": gone[1]})

        return ENVELOPE.guard(call)

    async def _connect(self, scope: Any, receive: Any, send: Any) -> None:
        """The Connect app, for this sandbox (the handlers read it from `TARGET`)."""
        headers = dict(scope.get("headers") or ())
        auth = headers.get(b"authorization", b"").decode("latin-1")
        try:
            target: tuple[Record, PrimeSandbox] | ConnectError = await self._resolve(
                scope["path_params"]["job_id"], auth
            )
        except Refused as r:
            code = Code.NOT_FOUND if r.status == 410 else Code.UNAUTHENTICATED
            target = ConnectError(code, r.message)
        path = scope["path"]
        method = path[path.index(f"/{SERVICE}/") :] if f"/{SERVICE}/" in path else path
        token = TARGET.set(target)
        try:
            await self.connect_app(
                {**scope, "path": method, "raw_path": method.encode(), "root_path": ""}, receive, send
            )
        finally:
            TARGET.reset(token)

    # -- files -------------------------------------------------------------------------------

    @staticmethod
    def _path(request: Request) -> str:
        path = request.query_params.get("path")
        if not path or "\x00" in path or len(path) > 4096:
            raise E.InvalidRequest("path is required")
        return path

    async def upload(self, request: Request, rec: Record, sb: PrimeSandbox) -> Response:
        path = self._path(request)
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > MAX_UPLOAD_BYTES + (1 << 20):
            raise BodyTooLarge(MAX_UPLOAD_BYTES)
        async with request.form(max_files=1, max_fields=8, max_part_size=1 << 20) as form:
            upload = form.get("file")
            if upload is None or isinstance(upload, str):
                raise E.InvalidRequest("the multipart body needs a `file` part")
            data = await upload.read(MAX_UPLOAD_BYTES + 1)
        if len(data) > MAX_UPLOAD_BYTES:
            raise BodyTooLarge(MAX_UPLOAD_BYTES)
        await rec.sandbox.write_file(path, data)
        return JSONResponse({"success": True, "path": path, "size": len(data), "timestamp": iso(time.time())})

    async def download(self, request: Request, rec: Record, sb: PrimeSandbox) -> Response:
        data = await rec.sandbox.read_file(self._path(request), max_bytes=MAX_DOWNLOAD_BYTES)
        return Response(data, media_type="application/octet-stream")

    async def read_file(self, request: Request, rec: Record, sb: PrimeSandbox) -> Response:
        path = self._path(request)
        q = request.query_params
        try:
            offset = int(q["offset"]) if q.get("offset") not in (None, "") else None
            length = int(q["length"]) if q.get("length") not in (None, "") else None
        except ValueError:
            raise E.InvalidRequest("offset and length must be integers") from None
        if length is not None and length <= 0:
            raise E.InvalidRequest("length must be positive")
        total = await self._size(rec, path)
        start = 0 if offset is None else (max(0, total + offset) if offset < 0 else min(offset, total))
        end = total if length is None else min(total, start + length)
        if end - start > MAX_READ_FILE_BYTES:
            raise E.TooLarge(
                f"{path}: {end - start} bytes is above the read limit of {MAX_READ_FILE_BYTES}; "
                "read a window with offset/length or download the file"
            )
        data = (
            b""
            if end == start
            else await rec.sandbox.read_file(
                path, offset=start, length=end - start, max_bytes=MAX_READ_FILE_BYTES
            )
        )
        return JSONResponse(
            {
                "content": data.decode("utf-8", "replace"),
                "size": len(data),
                "total_size": total,
                "offset": start,
                "truncated": start > 0 or start + len(data) < total,
            }
        )

    async def _size(self, rec: Record, path: str) -> int:
        """The size of the regular file `path` (`NotFound` if there is none)."""
        try:
            entry = await self.core.session(rec, "file_op").stat(path)
        except E.NotFound:
            raise E.NotFound(f"File not found: {path}") from None
        if entry.is_dir:
            raise E.InvalidRequest(f"{path} is a directory")
        return int(entry.size)

    # -- the older SDKs' exec ----------------------------------------------------------------

    async def exec(self, request: Request, rec: Record, sb: PrimeSandbox) -> Response:
        body = await ENVELOPE.json(request, EXEC_BODY_BYTES)
        if not isinstance(body, dict) or not isinstance(body.get("command"), str):
            raise E.InvalidRequest("command (a string) is required")
        timeout = body.get("timeout") or DEFAULT_EXEC_TIMEOUT_S
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, (int, float))
            or not 0 < timeout <= MAX_EXEC_TIMEOUT_S
        ):
            raise E.InvalidRequest(f"timeout must be in (0, {MAX_EXEC_TIMEOUT_S:g}] seconds")
        env = body.get("env") or {}
        if not isinstance(env, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in env.items()
        ):
            raise E.InvalidRequest("env must be an object of strings")
        user = body.get("user")
        if user is not None and user != sb.user:
            raise E.InvalidRequest(
                f"user {user!r} does not exist in this sandbox: commands run as {sb.user!r}"
            )
        cwd = body.get("working_dir") or None
        if cwd is not None and not isinstance(cwd, str):
            raise E.InvalidRequest("working_dir must be a string")
        r = await self.core.session(rec, "prime.exec").exec(
            ["/bin/bash", "-c", body["command"]],
            env=env or None,
            cwd=cwd,
            timeout=float(timeout),
            limits=COMMAND_LIMITS,
            keep_descendants=True,
        )
        if r.timed_out:
            raise Refused(408, f"command timed out after {timeout:g}s")
        code = r.shell_status
        return JSONResponse(
            {
                "stdout": r.stdout.decode("utf-8", "replace"),
                "stderr": r.stderr.decode("utf-8", "replace"),
                "exit_code": code,
            }
        )
