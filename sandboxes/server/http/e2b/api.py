"""The E2B control plane (`E2B_API_URL`), over the server's registry.

```
POST   /v2/sandboxes                  create -> 201 Sandbox {sandboxID, envdAccessToken, ...}
GET    /v2/sandboxes                  list (metadata / state filters, `x-next-token` paging)
POST   /v2/sandboxes/{id}/connect     200 Sandbox (the same access token); extends the timeout
POST   /sandboxes                     the same create (SDKs before the v2 route send it here)
GET    /sandboxes                     the running ones, unpaged (the v1 listing, `metadata` filter)
POST   /sandboxes/{id}/connect        the same connect (SDKs before the v2 route)
GET    /sandboxes/{id}                SandboxDetail
DELETE /sandboxes/{id}                204 (404: the SDK's `kill` returns False)
POST   /sandboxes/{id}/timeout        204: the sandbox ends `timeout` seconds from now
GET    /sandboxes/{id}/metrics        [] (no usage samples are collected)
POST   /sandboxes/{id}/pause          204 (409: paused already); `memory: false` keeps only files
POST   /sandboxes/{id}/resume         201 Sandbox (409: not paused); connect resumes too (201)
PUT    /sandboxes/{id}/network    204: its egress rules replaced (`network.py`); 409 paused
```

Volumes (`volumes.py`): the key's volumes, mounted by `create` with `volumeMounts`.

A pause keeps the processes where the sandbox runs (`memory` true, the default); one longer
than the server's bound, or a `memory: false` pause, keeps only its files (the processes end and
the sandbox restarts from them on resume, the platform's cold boot; `on_resume="reboot"` asks
for that too). The timeout stops while paused; resuming sets the timeout given, or what was left.

Snapshots (filesystem ones, and full ones and forks, which carry the running processes where the
backend and the host's CRIU take them, else 501) are `snapshots.py`'s; `create` with a snapshot's
id as `templateID` makes a sandbox from it.

The key is `X-API-KEY` (a server key). Errors are `{"code": <status>, "message": ...}`, the body
the SDK parses for every status it knows. A key sees only its own sandboxes; another key's is 404.
"""

from __future__ import annotations

import math
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from sandboxes import errors as E
from sandboxes.egress import EgressPolicy
from sandboxes.server.create import BuildNotReady, CreateSpec
from sandboxes.server.http.e2b.network import network_json, parse_network
from sandboxes.server.http.e2b.snapshots import Snapshots
from sandboxes.server.http.e2b.state import E2bSandbox
from sandboxes.server.http.e2b.templates import Templates
from sandboxes.server.http.e2b.volumes import Volumes
from sandboxes.server.http.endpoint import Envelope, Refused, code_body
from sandboxes.server.http.fields import str_map, volume_mounts

if TYPE_CHECKING:
    from sandboxes.server.http.e2b import E2bApi
    from sandboxes.server.registry import Record
    from sandboxes.templates import Template

__all__ = ["E2B_TEMPLATES", "ControlPlane"]


MAX_BODY_BYTES = 1 << 20
DEFAULT_TIMEOUT_S = 300
MAX_TIMEOUT_S = 24 * 3600
LIST_LIMIT = 100
MAX_LIST_LIMIT = 1000
MAX_METADATA = 64
MB = 1 << 20
# The platform's own templates: a sandbox of one runs on this server's agent (or default)
# template, which has python3 for the code interpreter.
E2B_TEMPLATES = frozenset({"base", "code-interpreter-v1", "code-interpreter"})

Handler = Callable[[Request, str], Awaitable[Response]]


ENVELOPE = Envelope("e2b", code_body)


class ControlPlane:
    """`routes()` of the REST API; `e2b` is the shared state (`E2bApi`)."""

    def __init__(self, e2b: E2bApi) -> None:
        self.e2b = e2b
        self.core = e2b.core
        self.volumes = Volumes(self)
        self.snapshots = Snapshots(self)
        self.templates = Templates(self)

    def routes(self) -> list[Route]:
        r = self._route
        return [
            r("/v2/sandboxes", self.create, "POST"),
            r("/v2/sandboxes", self.list, "GET"),
            r("/v2/sandboxes/{sandbox_id}/connect", self.connect, "POST"),
            r("/sandboxes", self.create, "POST"),
            r("/sandboxes", self.list_v1, "GET"),
            r("/sandboxes/{sandbox_id}/connect", self.connect, "POST"),
            r("/sandboxes/{sandbox_id}", self.get, "GET"),
            r("/sandboxes/{sandbox_id}", self.kill, "DELETE"),
            r("/sandboxes/{sandbox_id}/timeout", self.set_timeout, "POST"),
            r("/sandboxes/{sandbox_id}/metrics", self.metrics, "GET"),
            r("/sandboxes/{sandbox_id}/pause", self.pause, "POST"),
            r("/sandboxes/{sandbox_id}/resume", self.resume, "POST"),
            *(r(path, fn, method) for path, fn, method in self.templates.routes()),
            *(r(path, fn, method) for path, fn, method in self.snapshots.routes()),
            *(r(path, fn, method) for path, fn, method in self.volumes.routes()),
            r("/sandboxes/{sandbox_id}/network", self.set_network, "PUT"),
        ]

    def _route(self, path: str, fn: Handler, method: str) -> Route:
        endpoint = ENVELOPE.keyed(fn, owner=self.e2b.owner, draining=lambda: self.core.draining)
        return Route(path, endpoint, methods=[method])

    async def _body(self, request: Request) -> dict[str, Any]:
        body = await ENVELOPE.json(request, MAX_BODY_BYTES)
        if not isinstance(body, dict):
            raise Refused(400, "the body must be a JSON object")
        return body

    # -- lifecycle ---------------------------------------------------------------------------

    async def create(self, request: Request, owner: str) -> Response:
        body = await self._body(request)
        sb = await self.made(owner, body, request.headers.get("idempotency-key"))
        return JSONResponse(sb.created_json(), status_code=201)

    async def made(
        self, owner: str, body: dict[str, Any], idem: str | None = None, *, snapshot_of: str | None = None
    ) -> E2bSandbox:
        """A sandbox made as a create's `body` asks; a fork's (`snapshots.py`) is made from the
        snapshot `snapshot_of` and shows its source's `templateID`."""
        template_id = body.get("templateID")
        if not isinstance(template_id, str) or not template_id:
            raise Refused(400, "templateID is required")
        timeout = _timeout(body.get("timeout", DEFAULT_TIMEOUT_S))
        metadata = str_map(body.get("metadata"), "metadata")
        env = str_map(body.get("envVars"), "envVars")
        if len(metadata) > MAX_METADATA:
            raise Refused(400, f"at most {MAX_METADATA} metadata entries")
        auto_pause, pause_memory, auto_resume = _lifecycle(body)
        asked = {
            "the MCP gateway": bool(body.get("mcp")),
        }
        for what, wanted in asked.items():
            if wanted:
                raise Refused(400, f"{what} is not supported by this server")
        policy = parse_network(body.get("network"), body.get("allow_internet_access"))
        volumes = volume_mounts(
            self.core, owner, body.get("volumeMounts"), volume="name", path="path", what="volumeMounts"
        )
        # The server's option: a metadata entry that names the image or template to run.
        ref = snapshot_of or (metadata.get(self.e2b.image_key) if self.e2b.image_key else None) or template_id
        snapshot = ref.startswith("cp-")  # a snapshot of this key's (`snapshots.py`)
        spec = CreateSpec(
            image=None if snapshot or ref in E2B_TEMPLATES else ref,
            checkpoint=ref if snapshot else None,
            env=env,
            volumes=volumes,
            network=policy,
            ttl_s=float(timeout),
            on_ttl="pause" if auto_pause else "delete",
            pause_memory=pause_memory,
            idempotency_key=f"e2b:{idem}" if idem else None,
        )
        try:
            rec, source = await self.core.create(owner, spec)
        except BuildNotReady as e:
            raise Refused(404, e.message) from None
        except E.NotFound:
            if not snapshot:
                raise
            raise Refused(404, f"template {ref!r} not found") from None
        except E.ImageUnavailable as e:
            # As the platform answers a template it does not have.
            raise Refused(404, f"template {template_id!r} not found: {e.message}") from None
        # A retry with the same idempotency key gets the same record, already attached.
        sb = rec.attrs.get("e2b")
        if sb is None:
            tp = self.core.template_of(rec)
            sb = self._attach(rec, template_id, metadata, env, tp, tp.network is True)
            sb.domain = self.core.ports_base
            if source.build is not None:  # it starts where its build ended, as its build's user
                sb.work_dir = source.build.work_dir or sb.work_dir
                if source.build.run_as:
                    sb.user, sb.run_as = source.build.user, source.build.run_as
            sb.timeout_s = float(timeout)
            if auto_pause:
                sb.on_timeout, sb.auto_resume = "pause", auto_resume
            await self.core.save(rec)  # any replica of a cluster serves it from now on
        return sb

    @staticmethod
    def _attach(
        rec: Record,
        template_id: str,
        metadata: dict[str, str],
        env: dict[str, str],
        tp: Template | None,
        network: bool,
    ) -> E2bSandbox:
        root = tp is not None and tp.user == "root"
        sb = E2bSandbox(
            id=rec.id,
            template_id=template_id,
            template=rec.template,
            metadata=metadata,
            env=env,
            cpu_count=max(1, math.ceil(tp.cpu_quota)) if tp is not None and tp.cpu_quota else 1,
            memory_mb=int(tp.memory_bytes // MB) if tp is not None and tp.memory_bytes else 0,
            disk_mb=int(tp.disk_bytes // MB) if tp is not None else 0,
            user="root" if root else "user",
            work_dir=tp.work_dir if tp is not None else "/work",
            allow_internet_access=network,
            end_at=rec.expires_at or 0.0,
        )
        rec.attrs["e2b"] = sb
        return sb

    async def live(self, owner: str, sandbox_id: str) -> tuple[Record, E2bSandbox]:
        rec = await self.core.find_record(sandbox_id, owner)
        if rec is None or "e2b" not in rec.attrs:
            raise E.NotFound(f"sandbox {sandbox_id} not found")
        return rec, _view(rec)

    async def pause(self, request: Request, owner: str) -> Response:
        rec, sb = await self.live(owner, request.path_params["sandbox_id"])
        body = await self._body(request)
        memory = body.get("memory", True)
        if not isinstance(memory, bool):
            raise Refused(400, "memory must be a boolean")
        if not await self.core.pause(rec, memory=memory):
            raise Refused(409, f"sandbox {sb.id} is already paused")
        return Response(status_code=204)

    async def set_network(self, request: Request, owner: str) -> Response:
        """Replaces the sandbox's egress rules whole (an update that names none opens the public
        internet, as the platform's clears every rule); 409 while it is paused."""
        rec, _ = await self.live(owner, request.path_params["sandbox_id"])
        body = await self._body(request)
        policy = parse_network(body, body.get("allow_internet_access")) or EgressPolicy(deny=True)
        try:
            await self.core.set_network(rec, policy)
        except E.SandboxPaused as e:
            raise Refused(409, e.message) from None
        except E.InvalidRequest as e:
            raise Refused(400, e.message) from None
        return Response(status_code=204)

    async def resume(self, request: Request, owner: str) -> Response:
        rec, sb = await self.live(owner, request.path_params["sandbox_id"])
        body = await self._body(request)
        if rec.state != "paused":
            raise Refused(409, f"sandbox {sb.id} is already running")
        await self._resume(rec, sb, body)
        return JSONResponse(sb.created_json(), status_code=201)

    async def _resume(self, rec: Record, sb: E2bSandbox, body: dict[str, Any]) -> bool:
        """Resume a paused sandbox as connect and resume ask (`timeout`, `memory`: false is a
        cold boot from its files); whether it was paused."""
        memory = body.get("memory", True)
        if not isinstance(memory, bool):
            raise Refused(400, "memory must be a boolean")
        ttl = float(_timeout(body["timeout"])) if "timeout" in body else sb.timeout_s
        resumed = await self.core.resume(rec, ttl, memory=memory)
        if resumed:
            await self.core.save(rec)
        return resumed

    async def connect(self, request: Request, owner: str) -> Response:
        rec, sb = await self.live(owner, request.path_params["sandbox_id"])
        body = await self._body(request)
        if rec.state == "paused" and await self._resume(rec, sb, body):
            return JSONResponse(sb.created_json(), status_code=201)
        if "timeout" in body:
            # Connecting only ever extends a sandbox's life.
            ttl = float(_timeout(body["timeout"]))
            if time.time() + ttl > (rec.expires_at or 0.0):
                self._set_ttl(rec, sb, ttl)
        return JSONResponse(sb.created_json(), status_code=200)

    async def get(self, request: Request, owner: str) -> Response:
        rec, sb = await self.live(owner, request.path_params["sandbox_id"])
        detail = sb.detail_json()
        policy = self.core.network_of(rec)
        if isinstance(policy, EgressPolicy):
            detail["network"] = network_json(policy)
            detail["allowInternetAccess"] = policy.deny
        return JSONResponse(detail)

    async def kill(self, request: Request, owner: str) -> Response:
        rec, _ = await self.live(owner, request.path_params["sandbox_id"])
        await self.core.delete_record(rec, "delete")
        return Response(status_code=204)

    async def set_timeout(self, request: Request, owner: str) -> Response:
        rec, sb = await self.live(owner, request.path_params["sandbox_id"])
        body = await self._body(request)
        if "timeout" not in body:
            raise Refused(400, "timeout is required")
        self._set_ttl(rec, sb, float(_timeout(body["timeout"])))
        return Response(status_code=204)

    def _set_ttl(self, rec: Record, sb: E2bSandbox, ttl_s: float) -> None:
        self.core.set_ttl(rec, ttl_s)
        sb.end_at = rec.expires_at or 0.0

    async def list_v1(self, request: Request, owner: str) -> Response:
        wanted = _metadata_query(request.query_params.get("metadata"))
        chosen = self._select(owner, {"running"}, wanted, None, newest_first=True)
        return JSONResponse([sb.listed_json() for sb in chosen])

    async def list(self, request: Request, owner: str) -> Response:
        q = request.query_params
        states = {s for s in (q.get("state") or "running,paused").split(",") if s}
        if not states <= {"running", "paused"}:
            raise Refused(400, "state must be running and/or paused")
        wanted = _metadata_query(q.get("metadata"))
        try:
            limit = int(q.get("limit") or LIST_LIMIT)
        except ValueError:
            raise Refused(400, "limit must be an integer") from None
        if not 1 <= limit <= MAX_LIST_LIMIT:
            raise Refused(400, f"limit must be between 1 and {MAX_LIST_LIMIT}")
        chosen = self._select(owner, states, wanted, q.get("template"), q.get("order") != "asc")
        start = 0
        token = q.get("nextToken")
        if token:
            ids = [sb.id for sb in chosen]
            if token not in ids:
                raise Refused(400, "nextToken does not name a page of this listing")
            start = ids.index(token)
        page = chosen[start : start + limit]
        headers = {}
        if start + limit < len(chosen):
            headers["x-next-token"] = chosen[start + limit].id
        return JSONResponse([sb.listed_json() for sb in page], headers=headers)

    def _select(
        self,
        owner: str,
        states: set[str],
        wanted: dict[str, str],
        template: str | None,
        newest_first: bool,
    ) -> Sequence[E2bSandbox]:
        return sorted(
            (
                _view(r)
                for r in self.core.records(owner)
                if "e2b" in r.attrs
                and r.state in states
                and all(r.attrs["e2b"].metadata.get(k) == v for k, v in wanted.items())
                and (not template or template in (r.attrs["e2b"].template_id, r.template))
            ),
            key=lambda sb: (sb.started_at, sb.id),
            reverse=newest_first,
        )

    async def metrics(self, request: Request, owner: str) -> Response:
        # No samples are collected here (the platform answers [] before its first sample too).
        await self.live(owner, request.path_params["sandbox_id"])
        return JSONResponse([])


def _timeout(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= MAX_TIMEOUT_S:
        raise Refused(400, f"timeout must be a number of seconds in (0, {MAX_TIMEOUT_S}]")
    return math.ceil(value)


def _view(rec: Record) -> E2bSandbox:
    """The API's view of `rec`, with its state and end as the record has them now (a TTL may
    have paused it, a resume moved its end)."""
    sb: E2bSandbox = rec.attrs["e2b"]
    sb.state, sb.end_at = rec.state, rec.expires_at or 0.0
    return sb


def _lifecycle(body: dict[str, Any]) -> tuple[bool, bool, bool]:
    """`autoPause`, `autoPauseMemory` (default true) and `autoResume.enabled` of a create."""
    auto_pause, memory, resume = (
        body.get("autoPause", False),
        body.get("autoPauseMemory", True),
        body.get("autoResume"),
    )
    if not isinstance(auto_pause, bool) or not isinstance(memory, bool):
        raise Refused(400, "autoPause and autoPauseMemory must be booleans")
    enabled = resume.get("enabled", False) if isinstance(resume, dict) else resume
    if enabled is None:
        enabled = False
    if not isinstance(enabled, bool):
        raise Refused(400, "autoResume must be {enabled: boolean}")
    if enabled and not auto_pause:
        raise Refused(400, "autoResume needs autoPause")
    return auto_pause, memory, enabled


def _metadata_query(raw: str | None) -> dict[str, str]:
    """The SDK's `metadata` filter: `k=v&...` pairs, each key and value percent-quoted once more."""
    if not raw:
        return {}
    return {
        urllib.parse.unquote(k): urllib.parse.unquote(v)
        for k, v in urllib.parse.parse_qsl(raw, keep_blank_values=True)
    }
