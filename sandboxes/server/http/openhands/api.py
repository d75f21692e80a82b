"""The OpenHands runtime API's runtimes (the client's runtime API URL = this server's `/openhands`;
the key in `X-API-Key`), over the server's registry.

```
POST /start                  {image, command, working_dir, environment, session_id, ...}
                             -> {runtime_id, session_id, url, session_api_key, status, pod_status}
GET  /sessions/{session_id}  that runtime (an unknown session: 404)
GET  /sessions/batch?ids=..  [runtime, ...] of the sessions that have one
GET  /runtime/{runtime_id}   that runtime
GET  /list                   {runtimes: [...]}
POST /pause | /resume | /stop   {runtime_id} -> {runtime_id, status}
```

A runtime is a sandbox of `image` (a template the key built, `images.py`, or an image, as the
other APIs pick one: `image_templates.py`) whose main process is `command` (the agent server), run
with `sh -c` in `working_dir` with `environment`, the build's ENV under it, and the runtime's
session key as `SESSION_API_KEY` and `OH_SESSION_API_KEYS_0` (the agent server's own check). Its
`url` is the agent server's port (`--port N` of the command, else 60000) on a listener of its own
(`ServerCore.port_listener`): no path, since the client makes it the base URL of its HTTP client,
and HTTP and WebSockets alike. That port opens with the session key in `X-Session-API-Key`; `/alive`, `/health`, `/ready` and `/server_info` open without it, and so
does a WebSocket under `/sockets/`, whose key the agent server reads in the socket's first message.
`pod_status` is `ready` while the agent server runs (the client then polls `{url}/health`),
`failed` with `pod_logs` (its output's tail) once it ended, `paused` while paused.

Accepted and not applied: `runtime_class`, `run_as_user` / `run_as_group` / `fs_group` (programs
run as the template's user), `image_pull_policy` (an image is the server's template for it),
`resource_factor` (a runtime gets its template's bounds). Pause keeps the runtime's memory (the
cgroup freezer: the agent server lives through it); stop deletes the sandbox. Errors are the
platform's (FastAPI's) `{"detail": ...}`; another key's runtime is 404.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from sandboxes import errors as E
from sandboxes.server.create import BuildNotReady, CreateSpec
from sandboxes.server.http.endpoint import Envelope, Refused, detail_body
from sandboxes.server.http.fields import str_map
from sandboxes.server.http.openhands.state import ATTR, Runtime
from sandboxes.server.ports import PortGate

if TYPE_CHECKING:
    from sandboxes.server.http.openhands import OpenHandsApi
    from sandboxes.server.registry import Record

__all__ = ["DEFAULT_PORT", "ENVELOPE", "PREFIX", "Runtimes"]

PREFIX = "/openhands"
ENVELOPE = Envelope("openhands", detail_body, invalid=400)
DEFAULT_PORT = 60000  # the platform's agent server port
MAX_BODY_BYTES = 1 << 20
MAX_COMMAND = 64 << 10
SESSION_KEY_HEADER = "X-Session-API-Key"
OPEN_PATHS = frozenset({"/alive", "/health", "/ready", "/server_info"})
_PORT = re.compile(r"--port[ =](\d{1,5})\b")
_SESSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
PULL_POLICIES = ("Always", "IfNotPresent", "Never")
RESOURCE_FACTORS = (1, 2, 4, 8)
Handler = Callable[[Request, str], Awaitable[Response]]


class Runtimes:
    """`routes()` of the runtimes; `api` is the shared state (`OpenHandsApi`)."""

    def __init__(self, api: OpenHandsApi) -> None:
        self.api = api
        self.core = api.core
        self._starting: set[tuple[str, str]] = set()  # (owner, session id) being started

    def routes(self) -> list[Route]:
        r = self.route
        return [
            r("/start", self.start, "POST"),
            r("/sessions/batch", self.batch, "GET"),
            r("/sessions/{session_id}", self.session, "GET"),
            r("/runtime/{runtime_id}", self.runtime, "GET"),
            r("/list", self.list, "GET"),
            r("/pause", self.pause, "POST"),
            r("/resume", self.resume, "POST"),
            r("/stop", self.stop, "POST"),
        ]

    def route(self, path: str, fn: Handler, method: str) -> Route:
        endpoint = ENVELOPE.keyed(fn, owner=self.api.owner, draining=lambda: self.core.draining)
        return Route(PREFIX + path, endpoint, methods=[method])

    async def body(self, request: Request) -> dict[str, Any]:
        body = await ENVELOPE.json(request, MAX_BODY_BYTES)
        if not isinstance(body, dict):
            raise Refused(400, "the body must be a JSON object")
        return body

    def mine(self, owner: str) -> list[tuple[Record, Runtime]]:
        return [(rec, rec.attrs[ATTR]) for rec in self.core.records(owner) if ATTR in rec.attrs]

    def by_session(self, owner: str, session_id: str) -> tuple[Record, Runtime] | None:
        return next(((rec, rt) for rec, rt in self.mine(owner) if rt.session_id == session_id), None)

    async def by_id(self, owner: str, runtime_id: Any) -> tuple[Record, Runtime]:
        if not isinstance(runtime_id, str) or not runtime_id:
            raise Refused(400, "runtime_id is required")
        rec = await self.core.find_record(runtime_id, owner)
        if rec is None or ATTR not in rec.attrs:
            raise Refused(404, f"Runtime {runtime_id} not found")
        return rec, rec.attrs[ATTR]

    # -- starting ----------------------------------------------------------------------------

    async def start(self, request: Request, owner: str) -> Response:
        body = await self.body(request)
        image = body.get("image")
        if not isinstance(image, str) or not image:
            raise Refused(400, "image is required")
        command = body.get("command")
        if isinstance(command, list) and all(isinstance(a, str) for a in command):
            command = " ".join(command)
        if not isinstance(command, str) or not command.strip() or len(command) > MAX_COMMAND:
            raise Refused(400, "command (the agent server's, as a string) is required")
        working_dir = body.get("working_dir") or "/"
        if not isinstance(working_dir, str) or not working_dir.startswith("/"):
            raise Refused(400, "working_dir must be an absolute path")
        env = str_map(body.get("environment"), "environment")
        session_id = body.get("session_id") or f"session-{uuid.uuid4().hex}"
        if not isinstance(session_id, str) or not _SESSION.fullmatch(session_id):
            raise Refused(400, "session_id must be letters, digits, '.', '_' or '-' (at most 128)")
        factor = body.get("resource_factor", 1)
        if factor not in RESOURCE_FACTORS or isinstance(factor, bool):
            raise Refused(400, f"resource_factor must be one of {list(RESOURCE_FACTORS)}")
        if body.get("image_pull_policy", "IfNotPresent") not in PULL_POLICIES:
            raise Refused(400, f"image_pull_policy must be one of {list(PULL_POLICIES)}")
        for name in ("run_as_user", "run_as_group", "fs_group"):
            v = body.get(name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
                raise Refused(400, f"{name} must be a user or group id")
        if body.get("runtime_class") is not None and not isinstance(body.get("runtime_class"), str):
            raise Refused(400, "runtime_class must be a string")
        m = _PORT.search(command)
        port = int(m.group(1)) if m else DEFAULT_PORT
        if not 0 < port < 65536:
            raise Refused(400, f"the agent server's port must be 1..65535, got {port}")

        found = self.by_session(owner, session_id)
        if found is not None:  # the session's runtime, as the platform attaches to it
            return JSONResponse(found[1].to_json(found[0]))
        if (owner, session_id) in self._starting:
            raise Refused(409, f"session {session_id} is starting")
        self._starting.add((owner, session_id))
        try:
            return await self._start(owner, session_id, image, command, working_dir, env, port, factor)
        finally:
            self._starting.discard((owner, session_id))

    async def _start(
        self,
        owner: str,
        session_id: str,
        image: str,
        command: str,
        working_dir: str,
        env: dict[str, str],
        port: int,
        factor: int,
    ) -> Response:
        try:
            rec, source = await self.core.create(owner, CreateSpec(image=image, env=env))
        except BuildNotReady as e:
            raise Refused(400, e.message) from None
        except E.ImageUnavailable as e:
            raise Refused(400, f"image {image!r} could not be pulled: {e.message}") from None
        rt = Runtime(
            id=rec.id,
            session_id=session_id,
            image=image,
            command=command,
            working_dir=working_dir,
            port=port,
            resource_factor=factor,
        )
        if source.build is not None:
            env = {**source.build.env, **env}  # a built template's ENV, under the start's own
        env = {**env, "SESSION_API_KEY": rt.session_api_key, "OH_SESSION_API_KEYS_0": rt.session_api_key}
        gate = PortGate(
            SESSION_KEY_HEADER,
            rt.session_api_key,
            open_paths=OPEN_PATHS,
            upgrade_paths=("/sockets/",),
        )
        try:
            rt.url = self.core.port_listener(rec, port, gate)
            rec.attrs[ATTR] = rt
            self.api.start_server(rec, rt, env)
        except E.SandboxError as e:
            await self.core.delete_record(rec, "start failed")
            raise Refused(400 if isinstance(e, E.InvalidRequest) else 503, e.message) from None
        await self.core.save(rec)  # any replica of a cluster finds it from now on
        return JSONResponse(rt.to_json(rec), status_code=201)

    # -- reading -----------------------------------------------------------------------------

    async def session(self, request: Request, owner: str) -> Response:
        session_id = request.path_params["session_id"]
        found = self.by_session(owner, session_id)
        if found is None:
            raise Refused(404, f"Session {session_id} not found")
        return JSONResponse(found[1].to_json(found[0]))

    async def batch(self, request: Request, owner: str) -> Response:
        wanted = set(request.query_params.getlist("ids"))
        return JSONResponse([rt.to_json(rec) for rec, rt in self.mine(owner) if rt.session_id in wanted])

    async def runtime(self, request: Request, owner: str) -> Response:
        rec, rt = await self.by_id(owner, request.path_params["runtime_id"])
        return JSONResponse(rt.to_json(rec))

    async def list(self, request: Request, owner: str) -> Response:
        runtimes = sorted(self.mine(owner), key=lambda p: p[1].created_at)
        return JSONResponse({"runtimes": [rt.to_json(rec) for rec, rt in runtimes]})

    # -- pause, resume, stop -----------------------------------------------------------------

    async def pause(self, request: Request, owner: str) -> Response:
        rec, rt = await self.by_id(owner, (await self.body(request)).get("runtime_id"))
        if rec.state != "paused":
            await self.core.pause(rec)  # the agent server is frozen with it, not ended
            await self.core.save(rec)
        return JSONResponse({"runtime_id": rt.id, "status": "paused"})

    async def resume(self, request: Request, owner: str) -> Response:
        rec, rt = await self.by_id(owner, (await self.body(request)).get("runtime_id"))
        if rec.state == "paused":
            await self.core.resume(rec)
            await self.core.save(rec)
        return JSONResponse({"runtime_id": rt.id, "status": "running"})

    async def stop(self, request: Request, owner: str) -> Response:
        rec, rt = await self.by_id(owner, (await self.body(request)).get("runtime_id"))
        await self.core.delete_record(rec, "stop")
        return JSONResponse({"runtime_id": rt.id, "status": "stopped"})
