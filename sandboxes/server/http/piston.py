"""The Piston-compatible API (v2) over the server's core, and the batch shape of open-r1's code
execution router: tools that speak either work by changing an endpoint
(`sandboxes serve --http-port 8080`, then `http://HOST:8080/api/v2`).

```
GET  /api/v2/runtimes   [{language, version, aliases, runtime}]: the judge's languages, each
                        version as the sandboxes' own tool reports it (its `version` command)
POST /api/v2/execute    Piston's job: language, version ("*", "3", "3.11", "3.x", exact), files
                        [{name, content, encoding: utf8 | base64 | hex}] (the first is the
                        program), stdin, args, compile_timeout / run_timeout (ms; 10000 / 3000),
                        compile_memory_limit / run_memory_limit (bytes; -1: the template's)
                        -> {language, version, run, compile?}; each stage {stdout, stderr,
                        output, code, signal, status, message, memory, cpu_time, wall_time}
POST /execute_batch     {"scripts": [...], "language": "python" (or "languages": [...]),
                        "timeout": s} -> [{"execution": {results, logs, error,
                        execution_count}, "exception_str"}], code-interpreter semantics
                        (`cells.py`): the last expression's value is the main result's `text`
```

As Piston: a bad job is HTTP 400 `{"message": ...}` (an unknown runtime is
`"<language>-<version> runtime is unknown"`), a POST that is not JSON 415; a stage that fails
has `status` RE (non-zero exit), SG (a signal), TO (time limit), OL / EL (output cut), and a
failed compile is both `compile` and `run` (Piston's own backward-compatible answer). Each job
runs in a fresh sandbox claimed from the pool and destroyed after. Auth as SandboxFusion's
endpoint: the server's bearer keys, or open with `--http-insecure` (Piston has no auth).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import re
import signal as signals
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute

from sandboxes import errors as E
from sandboxes import languages
from sandboxes.server.auth import ApiKeys
from sandboxes.server.http import cells
from sandboxes.server.http.access import OneShotSurface
from sandboxes.server.http.endpoint import Envelope, Refused, message_body
from sandboxes.types import ExecResult, Limits

if TYPE_CHECKING:
    from sandboxes.server.surface_core import SurfaceCore

__all__ = ["PistonApi", "version_matches"]


MAX_BODY_BYTES = 64 << 20
MAX_TIMEOUT_MS = 3_600_000
MAX_BATCH = 1024
DEFAULT_RUN_TIMEOUT_MS = 3000
DEFAULT_COMPILE_TIMEOUT_MS = 10000
DEFAULT_BATCH_TIMEOUT_S = 300.0
_VERSION = re.compile(r"\d+(\.\d+){1,2}")


def version_matches(asked: str, have: str) -> bool:
    """Whether Piston's version `asked` ("*", "3", "3.x", "3.11", "3.11.2") names `have`."""
    if asked in ("*", "x", "latest"):
        return True
    want = [p for p in asked.split(".") if p not in ("x", "*")]
    return have.split(".")[: len(want)] == want


def _stage(r: ExecResult, timeout_s: float) -> dict[str, Any]:
    out, err = r.stdout.decode("utf-8", "replace"), r.stderr.decode("utf-8", "replace")
    sig = signals.Signals(r.signal).name if r.signal else None
    if r.timed_out:
        status, message, sig = "TO", f"Timeout: the program ran over {timeout_s:g} s", sig or "SIGKILL"
    elif r.signal:
        status, message = "SG", f"Killed by {sig}" + (" (out of memory)" if r.oom_killed else "")
    elif r.stdout_truncated:
        status, message = "OL", "stdout length exceeded"
    elif r.stderr_truncated:
        status, message = "EL", "stderr length exceeded"
    elif r.exit_code != 0:
        status, message = "RE", f"Exited with code {r.exit_code}"
    else:
        status, message = None, None
    return {
        "stdout": out,
        "stderr": err,
        "output": out + err,
        "code": None if (r.signal or r.timed_out) else r.exit_code,
        "signal": sig,
        "status": status,
        "message": message,
        "memory": r.peak_memory_bytes,
        "cpu_time": round(r.cpu_time_s * 1000),
        "wall_time": round(r.duration_s * 1000),
    }


def _decode(i: int, f: Any) -> bytes:
    content, encoding = f.get("content"), f.get("encoding") or "utf8"
    if not isinstance(content, str):
        raise E.InvalidRequest(f"files[{i}].content is required as a string")
    try:
        if encoding == "utf8":
            return content.encode("utf-8")
        if encoding == "base64":
            return base64.b64decode(content, validate=True)
        if encoding == "hex":
            return bytes.fromhex(content)
    except (binascii.Error, ValueError):
        raise E.InvalidRequest(f"files[{i}].content is not valid {encoding}") from None
    raise E.InvalidRequest(f"files[{i}].encoding must be utf8, base64 or hex")


def _file_name(i: int, name: Any) -> str:
    if not isinstance(name, str) or not name or name.startswith("/") or ".." in name.split("/"):
        raise E.InvalidRequest(f"files[{i}].name must be a relative path inside the job's directory")
    return name


def _ms(body: dict[str, Any], key: str, default: int) -> float:
    """A timeout in ms, as seconds."""
    v = body.get(key)
    if v is None:
        return default / 1000
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise E.InvalidRequest(f"If specified, {key} must be a number")
    if not 0 < v <= MAX_TIMEOUT_MS:
        raise E.InvalidRequest(f"{key} cannot exceed the configured limit of {MAX_TIMEOUT_MS}")
    return v / 1000


def _memory(body: dict[str, Any], key: str) -> Limits | None:
    v = body.get(key)
    if v is None or v == -1:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise E.InvalidRequest(f"If specified, {key} must be a non-negative number of bytes")
    return Limits(memory_bytes=v) if v else None


class PistonApi(OneShotSurface):
    """The Piston routes over the server's core (`routes()`)."""

    envelope = Envelope("piston", message_body)

    def __init__(self, core: SurfaceCore, auth: ApiKeys, **kwargs: Any) -> None:
        super().__init__(core, auth, **kwargs)
        self._runtimes: list[dict[str, Any]] | None = None
        self._runtimes_lock = asyncio.Lock()

    def routes(self) -> list[BaseRoute]:
        return [
            self.route("/api/v2/runtimes", self._list_runtimes, "GET"),
            self.route("/api/v2/execute", self._execute, "POST"),
            self.route("/execute_batch", self._execute_batch, "POST"),
        ]

    async def _json(self, request: Request) -> Any:
        if not request.headers.get("content-type", "").startswith("application/json"):
            raise Refused(415, "requests must be of type application/json")
        return await self.envelope.json(request, MAX_BODY_BYTES)

    async def runtimes(self, owner: str) -> list[dict[str, Any]]:
        """Every language whose tool answers `--version` in a sandbox of the pool (found once, in
        a sandbox of the first caller's)."""
        async with self._runtimes_lock:
            if self._runtimes is None:
                found = []
                async with self.sandbox(owner, "runtimes") as sb:
                    for lang in languages.table():
                        try:
                            r = await sb.exec(list(lang.version), timeout=30)
                        except E.SandboxError:
                            continue
                        m = _VERSION.search((r.stdout + r.stderr).decode("utf-8", "replace"))
                        if r.exit_code == 0 and m:
                            found.append(
                                {
                                    "language": lang.name,
                                    "version": m.group(0),
                                    "aliases": [a for a in lang.aliases if a != lang.name],
                                    "runtime": lang.version[0],
                                }
                            )
                self._runtimes = found
            return self._runtimes

    async def _list_runtimes(self, request: Request, owner: str) -> Response:
        return JSONResponse(await self.runtimes(owner))

    # -- /api/v2/execute -------------------------------------------------------------------------

    async def _execute(self, request: Request, owner: str) -> Response:
        job = await self._parse(await self._json(request), owner)
        return JSONResponse(await self._run(job, owner))

    async def _parse(self, body: Any, owner: str) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise E.InvalidRequest("the body must be a JSON object")
        language, version, files = body.get("language"), body.get("version"), body.get("files")
        if not language or not isinstance(language, str):
            raise E.InvalidRequest("language is required as a string")
        if not version or not isinstance(version, str):
            raise E.InvalidRequest("version is required as a string")
        if not isinstance(files, list):
            raise E.InvalidRequest("files is required as an array")
        decoded = [(f.get("name") if isinstance(f, dict) else None, _decode(i, f if isinstance(f, dict) else {}))
                   for i, f in enumerate(files)]  # fmt: skip
        lang = languages.by_name(language)
        rt = None
        if lang is not None:
            rt = next(
                (
                    r
                    for r in await self.runtimes(owner)
                    if r["language"] == lang.name and version_matches(version, r["version"])
                ),
                None,
            )
        if rt is None or lang is None:
            raise E.InvalidRequest(f"{language}-{version} runtime is unknown")
        if not decoded:
            raise E.InvalidRequest("files must include at least one utf8 encoded file")
        source, compile_argv, run_argv = languages.script_commands(lang.name)  # type: ignore[misc]  # known
        written: dict[str, bytes] = {source: decoded[0][1]}
        for i, (name, data) in enumerate(decoded[1:], start=1):
            written[_file_name(i, name)] = data
        args = body.get("args") or []
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise E.InvalidRequest("args must be an array of strings")
        stdin = body.get("stdin") or ""
        if not isinstance(stdin, str):
            raise E.InvalidRequest("stdin must be a string")
        return {
            "runtime": rt,
            "files": written,
            "compile": compile_argv,
            "run": run_argv + args,
            "stdin": stdin.encode("utf-8"),
            "run_timeout": _ms(body, "run_timeout", DEFAULT_RUN_TIMEOUT_MS),
            "compile_timeout": _ms(body, "compile_timeout", DEFAULT_COMPILE_TIMEOUT_MS),
            "run_limits": _memory(body, "run_memory_limit"),
            "compile_limits": _memory(body, "compile_memory_limit"),
        }

    async def _run(self, job: dict[str, Any], owner: str) -> dict[str, Any]:
        rt = job["runtime"]
        out: dict[str, Any] = {"language": rt["language"], "version": rt["version"]}
        async with self.sandbox(owner, "execute", job["files"]) as sb:
            if job["compile"] is not None:
                t = job["compile_timeout"]
                r = await sb.exec(job["compile"], timeout=t, limits=job["compile_limits"])
                out["compile"] = _stage(r, t)
                if r.exit_code != 0 or r.timed_out or r.signal:
                    out["run"] = out["compile"]
                    return out
            t = job["run_timeout"]
            r = await sb.exec(job["run"], timeout=t, stdin=job["stdin"], limits=job["run_limits"])
            out["run"] = _stage(r, t)
        return out

    # -- /execute_batch --------------------------------------------------------------------------

    async def _execute_batch(self, request: Request, owner: str) -> Response:
        scripts, langs, timeout = _parse_batch(await self._json(request))
        sem = asyncio.Semaphore(self.max_batch_concurrency)

        async def one(script: str, language: str) -> dict[str, Any]:
            async with sem:
                try:
                    return {
                        "execution": await self._cell(script, language, timeout, owner),
                        "exception_str": None,
                    }
                except E.QuotaExceeded as e:
                    return {"execution": None, "exception_str": e.message}
                except E.SandboxError as e:
                    return {"execution": None, "exception_str": f"{e.kind.value}: {e.message}"}

        return JSONResponse(list(await asyncio.gather(*(one(s, lang) for s, lang in zip(scripts, langs)))))

    async def _cell(self, script: str, language: str, timeout: float, owner: str) -> dict[str, Any]:
        """One script as a cell: Python through the cell runner; another language as a program
        whose non-zero exit is the error."""
        if languages.canonical(language) == "python":
            files = {cells.CELL_FILE: cells.source(script).encode(), cells.RUNNER_FILE: cells.RUNNER.encode()}
            async with self.sandbox(owner, "execute_batch", files) as sb:
                r = await sb.exec(["python3", cells.RUNNER_FILE], timeout=timeout)
                if r.timed_out:
                    timed_out = {
                        "name": "TimeoutError",
                        "value": f"the cell ran over {timeout:g} s",
                        "traceback": "",
                    }
                    return cells.execution(r.stdout, r.stderr, None, timed_out)
                try:
                    found: bytes | None = await sb.read_file(cells.RESULT_FILE)
                except E.NotFound:
                    found = None
                return cells.execution(r.stdout, r.stderr, found)
        source, compile_argv, run_argv = languages.script_commands(language)  # type: ignore[misc]  # checked
        async with self.sandbox(owner, "execute_batch", {source: script.encode("utf-8")}) as sb:
            for argv in (compile_argv, run_argv):
                if argv is None:
                    continue
                r = await sb.exec(argv, timeout=timeout)
                if r.exit_code != 0 or r.timed_out or r.signal:
                    why = (
                        "timed out" if r.timed_out else f"exited with {r.signal and -r.signal or r.exit_code}"
                    )
                    err = {
                        "name": "Error",
                        "value": f"{argv[0]} {why}",
                        "traceback": r.stderr.decode("utf-8", "replace"),
                    }
                    return cells.execution(r.stdout, r.stderr, None, err)
            return cells.execution(r.stdout, r.stderr, b'{"results": [], "error": null}')


def _parse_batch(body: Any) -> tuple[list[str], list[str], float]:
    if not isinstance(body, dict):
        raise E.InvalidRequest("the body must be a JSON object")
    scripts = body.get("scripts")
    if not isinstance(scripts, list) or not all(isinstance(s, str) for s in scripts):
        raise E.InvalidRequest("scripts is required as an array of strings")
    if len(scripts) > MAX_BATCH:
        raise E.InvalidRequest(f"at most {MAX_BATCH} scripts per batch")
    langs = body.get("languages")
    if langs is None:
        langs = [body.get("language") or "python"] * len(scripts)
    if (
        not isinstance(langs, list)
        or len(langs) != len(scripts)
        or not all(isinstance(x, str) for x in langs)
    ):
        raise E.InvalidRequest("languages must be an array of strings, one per script")
    for lang in langs:
        if languages.by_name(lang) is None:
            raise E.InvalidRequest(f"language {lang!r} is not supported here")
    timeout = body.get("timeout", DEFAULT_BATCH_TIMEOUT_S)
    if timeout is None:
        timeout = DEFAULT_BATCH_TIMEOUT_S
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, (int, float))
        or not 0 < timeout <= MAX_TIMEOUT_MS / 1000
    ):
        raise E.InvalidRequest("timeout must be a number of seconds")
    return scripts, langs, float(timeout)
