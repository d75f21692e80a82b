"""The SandboxFusion-compatible HTTP API over the server's pool: tools that speak that API work by
changing a URL (`sandboxes serve --http-port 8080`; routes served by `http.server.HttpServer`).

```
POST /run_code          SandboxFusion's RunCodeRequest -> RunCodeResponse
POST /run_code/batch    {"requests": [RunCodeRequest, ...]} (or a bare list) -> {"results": [RunCodeResponse, ...]}
GET  /v1/ping           "pong"            GET /health   {"status": "ok"}
```

Request fields (as SandboxFusion's): `code`, `language` (python, bash, cpp; c too), `stdin`,
`compile_timeout` / `run_timeout` (s, default 10), `memory_limit_MB` (-1: the template's), `files`
(path -> base64 content, written before the run), `fetch_files` (paths read back, base64).

Response: `status` "Success" (every step exited 0) / "Failed" / "SandboxError", `message`,
`compile_result` (compiled languages) and `run_result`, each `{status: Finished | TimeLimitExceeded |
Error, execution_time, return_code, stdout, stderr}` (`return_code` is -N when killed by signal N, as
Python's subprocess reports it, and null on a time limit), `files` (the fetched ones),
`executor_pod_name` (our sandbox id).

Each request runs in a fresh one-shot sandbox of the core (warm: no cold start), destroyed after.
A program's failure is a `Failed` response; an infrastructure failure is status `SandboxError` with
HTTP 200, exactly as SandboxFusion reports it (its client raises and retries; it never reads it as a
wrong answer). A malformed request is HTTP 422; a body over its bound 413; an exhausted quota 429; a
draining server 503.

Auth: `Authorization: Bearer <key>` with the server's keys; with `insecure=True` (the server's
`--insecure`, or `--http-insecure` for this endpoint alone, since SandboxFusion's API and client have
no auth) every caller is "anonymous".
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import time
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

from sandboxes import errors as E
from sandboxes import languages
from sandboxes.server.auth import ANONYMOUS
from sandboxes.server.http.access import OneShotSurface
from sandboxes.server.http.endpoint import Envelope, detail_body
from sandboxes.types import ExecResult, Limits

if TYPE_CHECKING:
    from sandboxes.sandbox import SandboxBase

__all__ = ["FusionApi"]

log = logging.getLogger("sandboxes.server.http")

MAX_TIMEOUT_S = 3600.0
MAX_BATCH = 1024


def _number(req: dict, key: str, default: float) -> float:
    v = req.get(key, default)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise E.InvalidRequest(f"{key} must be a number")
    return float(v)


def _parse(req: Any) -> dict[str, Any]:
    if not isinstance(req, dict):
        raise E.InvalidRequest("the request must be a JSON object")
    code, language = req.get("code"), req.get("language")
    if not isinstance(code, str):
        raise E.InvalidRequest("code (a string) is required")
    if not isinstance(language, str) or not language:
        raise E.InvalidRequest("language is required")
    if languages.script_commands(language) is None:
        known = ", ".join(lang.name for lang in languages.table())
        raise E.InvalidRequest(f"language {language!r} is not supported here (supported: {known})")
    compile_timeout = _number(req, "compile_timeout", 10.0)
    run_timeout = _number(req, "run_timeout", 10.0)
    for name, t in (("compile_timeout", compile_timeout), ("run_timeout", run_timeout)):
        if not 0 < t <= MAX_TIMEOUT_S:
            raise E.InvalidRequest(f"{name} must be in (0, {MAX_TIMEOUT_S:g}]")
    memory_mb = _number(req, "memory_limit_MB", -1.0)
    stdin = req.get("stdin")
    if stdin is not None and not isinstance(stdin, str):
        raise E.InvalidRequest("stdin must be a string")
    files: dict[str, bytes] = {}
    raw_files = req.get("files") or {}
    if not isinstance(raw_files, dict):
        raise E.InvalidRequest("files must be an object of path -> base64 content")
    for path, content in raw_files.items():
        if content is None:
            continue
        if not isinstance(content, str):
            raise E.InvalidRequest(f"files[{path!r}] must be base64 text")
        try:
            files[path] = base64.b64decode(content, validate=True)
        except (binascii.Error, ValueError):
            raise E.InvalidRequest(f"files[{path!r}] is not valid base64") from None
    fetch = req.get("fetch_files") or []
    if not isinstance(fetch, list) or not all(isinstance(p, str) for p in fetch):
        raise E.InvalidRequest("fetch_files must be a list of paths")
    return {
        "code": code,
        "language": language,
        "compile_timeout": compile_timeout,
        "run_timeout": run_timeout,
        "memory_mb": memory_mb,
        "stdin": stdin,
        "files": files,
        "fetch": fetch,
    }


def _command_result(r: ExecResult) -> dict[str, Any]:
    timed_out = bool(r.timed_out)
    return {
        "status": "TimeLimitExceeded" if timed_out else "Finished",
        "execution_time": r.duration_s,
        "cpu_time": r.cpu_time_s,
        "return_code": None if timed_out else (-r.signal if r.signal else r.exit_code),
        "stdout": r.stdout.decode("utf-8", "replace"),
        "stderr": r.stderr.decode("utf-8", "replace"),
    }


def _ok(result: dict[str, Any]) -> bool:
    return result["status"] == "Finished" and result["return_code"] == 0


def _sandbox_error(message: str) -> dict[str, Any]:
    return {
        "status": "SandboxError",
        "message": message,
        "compile_result": None,
        "run_result": None,
        "executor_pod_name": None,
        "files": {},
    }


MAX_BODY_BYTES = 256 << 20


class FusionApi(OneShotSurface):
    """The SandboxFusion routes over the server's core (`routes()`)."""

    envelope = Envelope("fusion", detail_body, invalid=422)

    def routes(self) -> list[BaseRoute]:
        return [
            self.route("/run_code", self._run_code, "POST"),
            self.route("/run_code/batch", self._run_code_batch, "POST"),
            Route("/v1/ping", _ping, methods=["GET"]),
            Route("/health", _health, methods=["GET"]),
        ]

    async def _run_code(self, request: Request, owner: str) -> Response:
        req = _parse(await self.envelope.json(request, MAX_BODY_BYTES))
        return JSONResponse(await self.run_one(req, owner))

    async def _run_code_batch(self, request: Request, owner: str) -> Response:
        body = await self.envelope.json(request, MAX_BODY_BYTES)
        items = body.get("requests") if isinstance(body, dict) else body
        if not isinstance(items, list):
            raise E.InvalidRequest('the body must be {"requests": [...]} or a list of requests')
        if len(items) > MAX_BATCH:
            raise E.InvalidRequest(f"at most {MAX_BATCH} requests per batch")
        reqs = [_parse(r) for r in items]
        sem = asyncio.Semaphore(self.max_batch_concurrency)

        async def one(req: dict[str, Any]) -> dict[str, Any]:
            async with sem:
                try:
                    return await self.run_one(req, owner)
                except (E.QuotaExceeded, E.InvalidRequest) as e:
                    return _sandbox_error(f"{e.kind.value}: {e.message}")

        return JSONResponse({"results": await asyncio.gather(*(one(r) for r in reqs))})

    # -- one run -------------------------------------------------------------------------------

    async def run_one(self, req: dict[str, Any], owner: str = ANONYMOUS) -> dict[str, Any]:
        """Run one parsed request in a fresh sandbox; a SandboxFusion RunCodeResponse dict."""
        try:
            return await self._run(req, owner)
        except (E.QuotaExceeded, E.InvalidRequest):
            raise
        except E.SandboxError as e:
            log.warning("run_code failed: %s: %s", e.kind.value, e.message)
            return _sandbox_error(f"{e.kind.value}: {e.message}")

    async def _run(self, req: dict[str, Any], owner: str) -> dict[str, Any]:
        source, compile_argv, run_argv = languages.script_commands(req["language"])  # type: ignore[misc]  # checked in _parse
        limits = Limits(memory_bytes=int(req["memory_mb"] * (1 << 20))) if req["memory_mb"] > 0 else None
        files: dict[str, Any] = {**req["files"], source: req["code"].encode("utf-8")}
        t0 = time.perf_counter()
        async with self.sandbox(owner, "run_code", files) as sb:
            compile_result = None
            if compile_argv is not None:
                r = await sb.exec(compile_argv, timeout=req["compile_timeout"])
                compile_result = _command_result(r)
                if not _ok(compile_result):
                    return self._response("Failed", compile_result, None, sb, {})
            r = await sb.exec(run_argv, timeout=req["run_timeout"], stdin=req["stdin"] or b"", limits=limits)
            run_result = _command_result(r)
            fetched: dict[str, str] = {}
            for path in req["fetch"]:
                try:
                    fetched[path] = base64.b64encode(await sb.read_file(path)).decode("ascii")
                except E.NotFound:
                    continue
            status = (
                "Success" if _ok(run_result) and (compile_result is None or _ok(compile_result)) else "Failed"
            )
            log.debug("run_code %s in %.3fs", req["language"], time.perf_counter() - t0)
            return self._response(status, compile_result, run_result, sb, fetched)

    @staticmethod
    def _response(
        status: str, compile_result: Any, run_result: Any, sb: SandboxBase, files: dict
    ) -> dict[str, Any]:
        return {
            "status": status,
            "message": "",
            "compile_result": compile_result,
            "run_result": run_result,
            "executor_pod_name": sb.id,
            "files": files,
        }


async def _health(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def _ping(request: Request) -> Response:
    return PlainTextResponse("pong")
