"""The OpenSandbox lifecycle API (the SDK's `domain` = this server's `/opensandbox`; it calls
`{domain}/v1/...` with the key in `OPEN-SANDBOX-API-KEY`), over the server's registry.

```
POST   /v1/sandboxes                          202 {id, status, metadata, expiresAt, createdAt, entrypoint}
GET    /v1/sandboxes?state&metadata&page&pageSize   {items, pagination}
GET    /v1/sandboxes/{id}                     200 Sandbox
PATCH  /v1/sandboxes/{id}/metadata            200 Sandbox (a null value removes its key)
DELETE /v1/sandboxes/{id}                     204
POST   /v1/sandboxes/{id}/pause | resume      202 (pause keeps its memory: the cgroup freezer)
POST   /v1/sandboxes/{id}/renew-expiration    200 {expiresAt} (409 while paused)
GET    /v1/sandboxes/{id}/endpoints/{port}    {endpoint: "host:port/path", headers?}
```

A create names an image, which picks the server's template as for the other APIs
(`image_templates.py`); `env` reaches every program, `metadata` is kept and filtered on, `timeout`
(seconds; null: none) is the record's TTL, renewed by `renew-expiration`. The SDK always sends
`resourceLimits` (`{"cpu": "1", "memory": "2Gi"}` unless told): a sandbox gets its template's
bounds, so they are read only to refuse what cannot be granted (GPUs). An `entrypoint` other
than the SDK's placeholder (`tail -f /dev/null`) runs as the sandbox's main process, in its
work dir, for the sandbox's life (at most a day: the agent's ceiling on a program's wall time). Endpoints: port 44772 is the sandbox's execd and 18080 its
egress sidecar, both served by this server (`execd.py`, `egress.py`) at a path that carries the
sandbox's own token (the SDK sends no key to them); any other port is the sandbox's own, through
the server's port routing (`ServerCore.port_access`). With `use_server_proxy` the execd and
egress endpoints are the platform's proxy path (`/v1/sandboxes/{id}/proxy/{port}`), where the
key is checked instead.

Snapshots (`snapshots.py`) are routes of this plane too; a create with a `snapshotId` starts
from one. Refused with the platform's body (`{code, message}`) and statuses: templates, the
network-policy and diagnostics routes (501), a create from a template, volumes,
lifecycle hooks, a credential proxy, GPUs, another platform than linux/amd64 (400). A key sees
only its own sandboxes; another key's is 404.
"""

from __future__ import annotations

import math
import re
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from starlette.datastructures import QueryParams
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from sandboxes import errors as E
from sandboxes.egress import EgressPolicy
from sandboxes.server.create import BuildNotReady, CreateSpec
from sandboxes.server.http.endpoint import Envelope, Refused
from sandboxes.server.http.fields import str_map
from sandboxes.server.http.opensandbox.snapshots import IMAGE_LABEL, WORK_DIR_LABEL, Snapshots
from sandboxes.server.http.opensandbox.state import ATTR, OpenSandbox, view
from sandboxes.server.http.timestamps import iso

if TYPE_CHECKING:
    from sandboxes.server.http.opensandbox import OpenSandboxApi
    from sandboxes.server.registry import Record

__all__ = ["API", "EGRESS_PORT", "ENVELOPE", "EXECD_PORT", "PREFIX", "ControlPlane", "error_body"]

PREFIX = "/opensandbox"
API = PREFIX + "/v1"
EXECD_PORT = 44772
EGRESS_PORT = 18080
PLACEHOLDER_ENTRYPOINT = ["tail", "-f", "/dev/null"]  # the SDK's default: no main process
MAX_BODY_BYTES = 1 << 20
MAX_METADATA = 64
DEFAULT_PAGE_SIZE = 20
MAX_PAGE_SIZE = 200

# The platform's error codes (`SandboxErrorCodes`), by status where a handler names none.
NOT_FOUND = "SANDBOX::NOT_FOUND"
INVALID = "SANDBOX::INVALID_PARAMETER"
NOT_SUPPORTED = "SANDBOX::API_NOT_SUPPORTED"
_CODES = {
    400: INVALID,
    401: "INVALID_API_KEY",
    403: "FORBIDDEN",
    404: NOT_FOUND,
    409: "SANDBOX::CONFLICT",
    413: INVALID,
    429: "SANDBOX::QUOTA_EXCEEDED",
    501: NOT_SUPPORTED,
    503: "SANDBOX::UNAVAILABLE",
}


def error_body(status: int, message: str) -> dict[str, Any]:
    """The platform's error body: `{code, message}`."""
    return {"code": _CODES.get(status, "SANDBOX::UNKNOWN_ERROR"), "message": message}


ENVELOPE = Envelope("opensandbox", error_body)
Handler = Callable[[Request, str], Awaitable[Response]]


def not_supported(what: str) -> Refused:
    return Refused(501, f"{what} is not supported by this server", fields={"code": NOT_SUPPORTED})


class ControlPlane:
    """`routes()` of the lifecycle API; `api` is the shared state (`OpenSandboxApi`)."""

    def __init__(self, api: OpenSandboxApi) -> None:
        self.api = api
        self.core = api.core
        self.snapshots = Snapshots(self)

    def routes(self) -> list[Route]:
        r = self._route
        return [
            r("/sandboxes", self.create, "POST"),
            r("/sandboxes", self.list, "GET"),
            r("/sandboxes/{sandbox_id}", self.get, "GET"),
            r("/sandboxes/{sandbox_id}", self.delete, "DELETE"),
            r("/sandboxes/{sandbox_id}/metadata", self.patch_metadata, "PATCH"),
            r("/sandboxes/{sandbox_id}/pause", self.pause, "POST"),
            r("/sandboxes/{sandbox_id}/resume", self.resume, "POST"),
            r("/sandboxes/{sandbox_id}/renew-expiration", self.renew, "POST"),
            r("/sandboxes/{sandbox_id}/endpoints/{port}", self.endpoint, "GET"),
            *(r(path, fn, method) for path, fn, method in self.snapshots.routes()),
            *(
                Route(API + path, ENVELOPE.guard(self._unsupported(what)), methods=methods)
                for path, what, methods in _UNSUPPORTED
            ),
        ]

    def _route(self, path: str, fn: Handler, method: str) -> Route:
        endpoint = ENVELOPE.keyed(fn, owner=self.api.owner, draining=lambda: self.core.draining)
        return Route(API + path, endpoint, methods=[method])

    @staticmethod
    def _unsupported(what: str) -> Callable[[Request], Awaitable[Response]]:
        async def refuse(request: Request) -> Response:
            raise not_supported(what)

        return refuse

    async def _body(self, request: Request) -> dict[str, Any]:
        body = await ENVELOPE.json(request, MAX_BODY_BYTES)
        if not isinstance(body, dict):
            raise Refused(400, "the body must be a JSON object")
        return body

    async def live(self, owner: str, sandbox_id: str) -> tuple[Record, OpenSandbox]:
        """`owner`'s sandbox, with its state as the record has it."""
        rec = await self.core.find_record(sandbox_id, owner)
        if rec is None or ATTR not in rec.attrs:
            raise Refused(404, f"Sandbox {sandbox_id} not found")
        return rec, view(rec)

    # -- lifecycle ---------------------------------------------------------------------------

    async def create(self, request: Request, owner: str) -> Response:
        body = await self._body(request)
        for key, what in _REFUSED_AT_CREATE:
            if body.get(key):
                raise Refused(400, f"{what} ({key}) is not supported by this server")
        image = body.get("image")
        uri = image.get("uri") if isinstance(image, dict) else None
        snapshot_id = body.get("snapshotId")
        snapshot = None
        if snapshot_id is not None:
            if not isinstance(snapshot_id, str) or uri:
                raise Refused(400, "a create names one of image.uri and snapshotId")
            snapshot = self.snapshots.of(owner, snapshot_id)
            uri = snapshot.labels.get(IMAGE_LABEL, snapshot.template)
        elif not isinstance(uri, str) or not uri:
            raise Refused(400, "image.uri (or snapshotId) is required")
        if isinstance(image, dict) and image.get("auth"):
            raise Refused(400, "private registries (image.auth) are not supported by this server")
        entrypoint = body.get("entrypoint") or PLACEHOLDER_ENTRYPOINT
        if not isinstance(entrypoint, list) or not all(isinstance(a, str) for a in entrypoint):
            raise Refused(400, "entrypoint must be a list of strings")
        env, metadata = str_map(body.get("env"), "env"), str_map(body.get("metadata"), "metadata")
        if len(metadata) > MAX_METADATA:
            raise Refused(400, f"at most {MAX_METADATA} metadata entries")
        extensions = str_map(body.get("extensions"), "extensions")
        _check_resources(body.get("resourceLimits"), "resourceLimits")
        _check_resources(body.get("resourceRequests"), "resourceRequests")
        _check_platform(body.get("platform"))
        timeout = body.get("timeout")
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int) or timeout < 1):
            raise Refused(400, "timeout must be a whole number of seconds, at least 1 (or null: none)")
        spec = CreateSpec(
            image=uri if snapshot is None else None,
            checkpoint=snapshot.id if snapshot is not None else None,
            env=env,
            network=_policy(body.get("networkPolicy")),
            ttl_s=float(timeout) if timeout is not None else None,
        )
        try:
            rec, source = await self.core.create(owner, spec)
        except BuildNotReady as e:
            raise Refused(400, e.message) from None
        except E.ImageUnavailable as e:
            raise Refused(400, f"image {uri!r} could not be pulled: {e.message}") from None
        tp = self.core.template_of(rec)
        if source.build is not None:
            env = {**source.build.env, **env}  # a built template's ENV, under the create's own
        work_dir = (
            (snapshot.labels.get(WORK_DIR_LABEL, "") if snapshot is not None else "")
            or (source.build.work_dir if source.build is not None else "")
            or tp.work_dir
            or "/work"
        )
        sb = OpenSandbox(
            id=rec.id,
            image=uri,
            template=rec.template,
            entrypoint=list(entrypoint),
            metadata=metadata,
            env=env,
            work_dir=work_dir,
            extensions=extensions,
            timeout_s=float(timeout) if timeout is not None else None,
        )
        rec.attrs[ATTR] = sb
        if entrypoint != PLACEHOLDER_ENTRYPOINT:
            try:
                self.api.start_main(rec, sb)
            except E.SandboxError as e:
                await self.core.delete_record(rec, "create failed")
                raise Refused(400, f"the entrypoint could not start: {e.message}") from None
        await self.core.save(rec)  # any replica of a cluster serves it from now on
        out = sb.to_json(rec.expires_at)
        del out["image"]
        return JSONResponse(out, status_code=202)

    async def get(self, request: Request, owner: str) -> Response:
        rec, sb = await self.live(owner, request.path_params["sandbox_id"])
        return JSONResponse(sb.to_json(rec.expires_at))

    async def list(self, request: Request, owner: str) -> Response:
        q = request.query_params
        wanted = _metadata_filter(q.get("metadata"))
        states = {s.lower() for s in q.getlist("state")}
        chosen = []
        for rec in self.core.records(owner):
            if ATTR not in rec.attrs:
                continue
            sb = view(rec)
            if states and sb.state.lower() not in states:
                continue
            if any(sb.metadata.get(k) != v for k, v in wanted.items()):
                continue
            chosen.append((rec, sb))
        chosen.sort(key=lambda p: (p[1].created_at, p[1].id), reverse=True)
        return JSONResponse(self.paged(q, [sb.to_json(rec.expires_at) for rec, sb in chosen]))

    @staticmethod
    def paged(q: QueryParams, items: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """The page of `items` that `q` (`page`, `pageSize`) asks for: `{items, pagination}`."""
        page, size = (
            _int(q.get("page"), "page", 1, 1),
            _int(q.get("pageSize"), "pageSize", DEFAULT_PAGE_SIZE, 1),
        )
        if size > MAX_PAGE_SIZE:
            raise Refused(400, f"pageSize must be at most {MAX_PAGE_SIZE}")
        total = len(items)
        pages = math.ceil(total / size)
        return {
            "items": [*items[(page - 1) * size : page * size]],
            "pagination": {
                "page": page,
                "pageSize": size,
                "totalItems": total,
                "totalPages": pages,
                "hasNextPage": page < pages,
            },
        }

    async def patch_metadata(self, request: Request, owner: str) -> Response:
        rec, sb = await self.live(owner, request.path_params["sandbox_id"])
        patch = await self._body(request)
        if not all(isinstance(k, str) and (v is None or isinstance(v, str)) for k, v in patch.items()):
            raise Refused(400, "metadata must map strings to strings (or null, to remove one)")
        metadata = dict(sb.metadata)
        for k, v in patch.items():
            if v is None:
                metadata.pop(k, None)
            else:
                metadata[k] = v
        if len(metadata) > MAX_METADATA:
            raise Refused(400, f"at most {MAX_METADATA} metadata entries")
        sb.metadata = metadata
        await self.core.save(rec)
        return JSONResponse(sb.to_json(rec.expires_at))

    async def delete(self, request: Request, owner: str) -> Response:
        rec, _ = await self.live(owner, request.path_params["sandbox_id"])
        await self.core.delete_record(rec, "delete")
        return Response(status_code=204)

    async def pause(self, request: Request, owner: str) -> Response:
        rec, sb = await self.live(owner, request.path_params["sandbox_id"])
        if sb.state != "Running":
            raise Refused(409, f"Sandbox {sb.id} is not running", fields={"code": "SANDBOX::NOT_RUNNING"})
        await self.core.pause(rec)  # its programs are frozen with it, not ended
        view(rec)
        await self.core.save(rec)
        return Response(status_code=202)

    async def resume(self, request: Request, owner: str) -> Response:
        rec, sb = await self.live(owner, request.path_params["sandbox_id"])
        if sb.state != "Paused":
            raise Refused(409, f"Sandbox {sb.id} is not paused", fields={"code": "SANDBOX::NOT_PAUSED"})
        await self.core.resume(rec)  # its TTL runs again from where the pause left it
        view(rec)
        await self.core.save(rec)
        return Response(status_code=202)

    async def renew(self, request: Request, owner: str) -> Response:
        rec, sb = await self.live(owner, request.path_params["sandbox_id"])
        raw = (await self._body(request)).get("expiresAt")
        try:
            when = datetime.fromisoformat(raw) if isinstance(raw, str) else None
        except ValueError:
            when = None
        if when is None or when.tzinfo is None:
            raise Refused(400, "expiresAt must be an RFC 3339 time with its zone")
        ttl = when.timestamp() - time.time()
        if ttl <= 0:
            raise Refused(
                400, "expiresAt must be in the future", fields={"code": "SANDBOX::INVALID_EXPIRATION"}
            )
        if sb.state != "Running":
            raise Refused(409, f"Sandbox {sb.id} is not running", fields={"code": "SANDBOX::NOT_RUNNING"})
        self.core.set_ttl(rec, ttl)
        await self.core.save(rec)
        return JSONResponse({"expiresAt": iso(rec.expires_at or when.timestamp())})

    async def endpoint(self, request: Request, owner: str) -> Response:
        rec, sb = await self.live(owner, request.path_params["sandbox_id"])
        port = _int(request.path_params["port"], "port", 0, 1)
        if port > 65535:
            raise Refused(400, "port must be 1..65535")
        proxy = request.query_params.get("use_server_proxy", "").lower() == "true"
        if request.query_params.get("expires"):
            raise Refused(400, "signed endpoints (expires) are not supported by this server")
        here = str(request.base_url).rstrip("/").split("://", 1)[-1]
        if port in (EXECD_PORT, EGRESS_PORT):
            if proxy:
                return JSONResponse({"endpoint": f"{here}{API}/sandboxes/{sb.id}/proxy/{port}"})
            what = "execd" if port == EXECD_PORT else "egress"
            return JSONResponse({"endpoint": f"{here}{PREFIX}/{what}/{sb.id}/{sb.execd_token}"})
        try:
            url, _, _ = self.core.port_access(rec, port)
        except E.InvalidRequest as e:
            raise Refused(400, e.message) from None
        return JSONResponse({"endpoint": url.split("://", 1)[-1].rstrip("/")})


# Lifecycle routes of the platform this server does not serve (501, the platform's answer).
_UNSUPPORTED: tuple[tuple[str, str, list[str]], ...] = (
    ("/templates", "templates", ["GET", "POST"]),
    ("/templates/{template_id}", "templates", ["GET", "DELETE"]),
    (
        "/sandboxes/{sandbox_id}/networkpolicy",
        "the lifecycle network policy",
        ["GET", "PUT", "PATCH", "DELETE"],
    ),
    ("/sandboxes/{sandbox_id}/diagnostics/{what}", "diagnostics", ["GET"]),
    ("/metrics/events", "metrics events", ["POST"]),
)

# Create fields this server refuses (400): what it cannot give a sandbox.
_REFUSED_AT_CREATE = (
    ("templateId", "a create from a template"),
    ("volumes", "volumes"),
    ("lifecycle", "lifecycle hooks"),
    ("credentialProxy", "a credential proxy"),
)

_QUANTITY = re.compile(r"^(\d+(?:\.\d+)?)(m|k|Ki|M|Mi|G|Gi|T|Ti)?$")


def _check_resources(value: Any, name: str) -> None:
    """Resources as quantities (`"500m"`, `"2Gi"`): granted as the template's bounds, so only a
    malformed one or a GPU is refused."""
    limits = str_map(value, name)
    for k, v in limits.items():
        if k in ("gpu", "nvidia.com/gpu") and v.strip() not in ("", "0"):
            raise Refused(400, "GPUs are not available on this server")
        if not _QUANTITY.match(v.strip()):
            raise Refused(400, f"{name}.{k} must be a quantity such as '500m' or '2Gi', got {v!r}")


def _check_platform(value: Any) -> None:
    if value is None:
        return
    if not isinstance(value, dict):
        raise Refused(400, "platform must be an object {os, arch}")
    if value.get("os", "linux") != "linux" or value.get("arch", "amd64") not in ("amd64", "x86_64"):
        raise Refused(
            400, f"this server runs linux/amd64 sandboxes only, not {value.get('os')}/{value.get('arch')}"
        )


def _policy(value: Any) -> EgressPolicy | None:
    """A create's `networkPolicy` as the sandbox's egress policy: `defaultAction` deny (the
    platform's default) with its `allow` rules is an allow-list, `allow` with its `deny` rules a
    deny-list (the other rules change nothing under that default)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise Refused(400, "networkPolicy must be an object")
    default = value.get("defaultAction") or "deny"
    rules = value.get("egress") or []
    if default not in ("allow", "deny") or not isinstance(rules, list):
        raise Refused(400, "networkPolicy is {defaultAction: allow|deny, egress: [{action, target}]}")
    if not all(
        isinstance(r, dict) and r.get("action") in ("allow", "deny") and isinstance(r.get("target"), str)
        for r in rules
    ):
        raise Refused(400, "each egress rule is {action: allow|deny, target}")
    try:
        if default == "deny":
            return EgressPolicy.of(allow=[r["target"] for r in rules if r["action"] == "allow"])
        return EgressPolicy.of(deny=[r["target"] for r in rules if r["action"] == "deny"])
    except E.InvalidRequest as e:
        raise Refused(400, e.message) from None


def _metadata_filter(raw: str | None) -> dict[str, str]:
    """`metadata=k%3Dv%26k2%3Dv2` (one parameter holding a query string) as a map."""
    if not raw:
        return {}
    try:
        return dict(urllib.parse.parse_qsl(raw, keep_blank_values=True, strict_parsing=True))
    except ValueError as e:
        raise Refused(
            400, f"Invalid metadata format: {e}", fields={"code": "INVALID_METADATA_FORMAT"}
        ) from None


def _int(value: Any, name: str, default: int, low: int) -> int:
    if value is None or value == "":
        return default
    try:
        n = int(value)
    except ValueError:
        raise Refused(400, f"{name} must be an integer") from None
    if n < low:
        raise Refused(400, f"{name} must be at least {low}")
    return n
