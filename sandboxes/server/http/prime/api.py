"""The Prime Sandboxes control plane, `{base}/api/v1/sandbox...`, over the server's registry.

A user points the `prime-sandboxes` SDK here with `PRIME_API_BASE_URL=http://HOST:PORT` and
`PRIME_API_KEY=<a server key>` (sent as `Authorization: Bearer`). Create claims a warm sandbox of
the template the image maps to (`image_templates.py`) and answers RUNNING; commands, files and
jobs then go to the sandbox's gateway (`gateway.py`) with the token of `POST .../auth`.
Checkpoints (`checkpoints.py`) and volumes (`volumes.py`) are routes of this plane too; `create`
with a `checkpoint_id` restores one, with `volumes` attaches them.

`timeout_minutes` is the record's TTL (its end: TIMEOUT) and `idle_timeout_minutes` its idle
bound (its end: TERMINATED, `idle_timeout`), both the registry's; the gateway's calls are the
activity that renews the idle bound (`ServerCore.touch`).

Errors are `{"detail": ...}` with the status the SDK maps: 401 (UnauthorizedError), 404, 422
(invalid request), 429 (quota), 503 (draining). A key sees only its own sandboxes; another key's
sandbox is 404, as an unknown one.
"""

from __future__ import annotations

import asyncio
import dataclasses
import shlex
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from sandboxes import errors as E
from sandboxes.server.create import CreateSpec
from sandboxes.server.http.endpoint import Envelope, detail_body
from sandboxes.server.http.prime import jobs
from sandboxes.server.http.prime.checkpoints import IMAGE_LABEL, Checkpoints
from sandboxes.server.http.prime.requests import (
    CreateArgs,
    parse_create,
    parse_ids,
    parse_page,
    parse_policy,
)
from sandboxes.server.http.prime.state import START_LOG, PrimeSandbox
from sandboxes.server.http.prime.volumes import Volumes
from sandboxes.types import Limits

if TYPE_CHECKING:
    from sandboxes.server.http.prime import PrimeApi
    from sandboxes.server.registry import Record
    from sandboxes.server.session import Session
    from sandboxes.templates import Template

__all__ = ["ControlPlane"]


MAX_BODY_BYTES = 4 << 20
GB = 1 << 30
COMMAND_OUTPUT_BYTES = 256 << 20

Handler = Callable[[Request, str], Awaitable[Response]]


# The platform's API answers FastAPI's `{"detail": ...}`; a bad request is 422, and a failure
# behind it 502 (its gateway's).
ENVELOPE = Envelope("prime", detail_body, invalid=422, other=502)


class ControlPlane:
    """`routes()` of `/api/v1/...`; `prime` is the shared state (`PrimeApi`)."""

    def __init__(self, prime: PrimeApi) -> None:
        self.prime = prime
        self.core = prime.core

    def routes(self) -> list[Route]:
        r = self._route
        return [
            *(r(path, fn, method) for path, fn, method in Checkpoints(self).routes()),
            *(r(path, fn, method) for path, fn, method in Volumes(self).routes()),
            r("/api/v1/sandbox", self.create, "POST"),
            r("/api/v1/sandbox", self.list, "GET"),
            r("/api/v1/sandbox", self.bulk_delete, "DELETE"),
            r("/api/v1/sandbox/status:batchGet", self.statuses, "POST"),
            r("/api/v1/sandbox/background-jobs/status:batchGet", self.job_statuses, "POST"),
            r("/api/v1/sandbox/{sandbox_id}", self.get, "GET"),
            r("/api/v1/sandbox/{sandbox_id}", self.delete, "DELETE"),
            r("/api/v1/sandbox/{sandbox_id}/auth", self.auth, "POST"),
            r("/api/v1/sandbox/{sandbox_id}/logs", self.logs, "GET"),
            r("/api/v1/sandbox/{sandbox_id}/error-context", self.error_context, "GET"),
            r("/api/v1/sandbox/{sandbox_id}/egress-policy", self.get_policy, "GET"),
            r("/api/v1/sandbox/{sandbox_id}/egress-policy", self.set_policy, "PUT"),
        ]

    def _route(self, path: str, fn: Handler, method: str) -> Route:
        endpoint = ENVELOPE.keyed(fn, owner=self.prime.owner, draining=lambda: self.core.draining)
        return Route(path, endpoint, methods=[method])

    @staticmethod
    async def _body(request: Request) -> Any:
        return await ENVELOPE.json(request, MAX_BODY_BYTES)

    # -- lifecycle ---------------------------------------------------------------------------

    async def create(self, request: Request, owner: str) -> Response:
        args = parse_create(await self._body(request))
        spec = CreateSpec(
            image=args.docker_image or None,
            checkpoint=args.checkpoint_id or None,
            env={**args.environment_vars, **args.secrets},
            versioned_volumes=[(m.name, m.mount_path, m.read_only) for m in args.volumes] or None,
            network=args.network.egress if args.network is not None else None,
            ttl_s=args.timeout_minutes * 60.0 if args.timeout_minutes > 0 else None,
            idle_s=args.idle_timeout_minutes * 60.0 if args.idle_timeout_minutes else None,
            idempotency_key=f"prime:{args.idempotency_key}" if args.idempotency_key else None,
        )
        try:
            rec, source = await self.core.create(owner, spec)
        except E.ImageUnavailable as e:
            # As the platform answers an image it cannot pull: a sandbox in ERROR, whose wait
            # raises the SDK's SandboxImagePullError.
            failed = self._failed(owner, args, None, "IMAGE_PULL_FAILED", e.message)
            return JSONResponse(failed.to_json())
        # A retry with the same idempotency key gets the same record, already attached (attaching
        # does not await, so the first of concurrent retries attaches it for all).
        sb: PrimeSandbox | None = rec.attrs.get("prime")
        if sb is None:
            if args.checkpoint_id:  # the image the checkpoint's sandbox was asked of
                cp = self.core.checkpoint_of(owner, args.checkpoint_id)
                args = dataclasses.replace(args, docker_image=cp.labels.get(IMAGE_LABEL, cp.template))
            sb = self._attach(rec, args, self.core.template_of(rec), source.why)
            await self._start_command(rec, sb, args)
        auth = await self.prime.gateway_auth(request, rec, sb)
        return JSONResponse({**sb.to_json(), "gatewayAuth": auth})

    def _failed(
        self, owner: str, args: CreateArgs, tp: Template | None, error_type: str, message: str
    ) -> PrimeSandbox:
        """A sandbox that could not start: a tombstone in ERROR (get, list and waits see it)."""
        sb = self._view(f"sb-{uuid.uuid4().hex[:12]}", args, tp, template=tp.name if tp else "")
        sb.end("ERROR", "create_failed", error_type, message)
        self.prime.tombstones.add(owner, sb)
        return sb

    def _attach(self, rec: Record, args: CreateArgs, tp: Template, why: str) -> PrimeSandbox:
        """The API's view of a newly claimed sandbox: what it was asked for, within the template."""
        sb = self._view(rec.id, args, tp, template=rec.template)
        self.apply_limits(rec, sb)
        rec.attrs["prime"] = sb
        sb.note(f"sandbox {sb.id} created: {sb.name}")
        sb.note(f"image {args.docker_image} runs as template {rec.template!r} ({why})")
        return sb

    def apply_limits(self, rec: Record, sb: PrimeSandbox) -> None:
        """Each command gets the memory asked for, within the sandbox's own (kernel) bound, may
        write files as large as its disk, and returns up to COMMAND_OUTPUT_BYTES of output."""
        tp = self.core.template(rec.template)
        rec.sandbox.default_limits = rec.sandbox.default_limits.merged(
            Limits(
                memory_bytes=int(sb.memory_gb * GB),
                max_file_size_bytes=(tp.disk_bytes if tp is not None else 0) or None,
                max_output_bytes=COMMAND_OUTPUT_BYTES,
            )
        )

    @staticmethod
    def _view(sandbox_id: str, args: CreateArgs, tp: Template | None, *, template: str) -> PrimeSandbox:
        memory_gb = args.memory_gb
        if tp is not None and tp.memory_bytes:
            memory_gb = min(memory_gb, tp.memory_bytes / GB)
        cpu = args.cpu_cores
        if tp is not None and tp.cpu_quota:
            cpu = min(cpu, tp.cpu_quota)
        root = tp is not None and tp.user == "root"
        disk_bytes = tp.disk_bytes if tp is not None else 0
        return PrimeSandbox(
            id=sandbox_id,
            name=args.name,
            docker_image=args.docker_image,
            template=template,
            cpu_cores=cpu,
            memory_gb=round(memory_gb, 3),
            disk_size_gb=round(min(args.disk_size_gb, disk_bytes / GB), 3)
            if disk_bytes
            else args.disk_size_gb,
            disk_mount_path="/" if root else (tp.work_dir if tp is not None else "/work"),
            timeout_minutes=args.timeout_minutes,
            idle_timeout_minutes=args.idle_timeout_minutes,
            labels=args.labels,
            environment_vars=args.environment_vars,
            secrets=args.secrets,
            vm=args.vm,
            start_command=args.start_command,
            network_allowlist=args.network.allowlist if args.network else None,
            network_denylist=args.network.denylist if args.network else None,
            user="root" if root else "sandbox",
        )

    async def _start_command(self, rec: Record, sb: PrimeSandbox, args: CreateArgs) -> None:
        if not args.start_shell:
            return
        line = f"({args.start_shell}) > {START_LOG} 2>&1 < /dev/null &"
        r = await rec.sandbox.exec(["/bin/bash", "-c", line], keep_descendants=True, timeout=30)
        sb.note(f"start command {shlex.quote(args.start_shell)}: launched (exit {r.exit_code})")

    async def _live(self, owner: str, sandbox_id: str) -> tuple[Record, PrimeSandbox]:
        rec = await self.core.find_record(sandbox_id, owner)
        if rec is None or "prime" not in rec.attrs:
            raise E.NotFound(f"Sandbox {sandbox_id} not found")
        return rec, rec.attrs["prime"]

    def _session_of(self, owner: str) -> Callable[[str], Awaitable[Session]]:
        """`lookup` of a session of `owner`'s live records for `jobs.statuses`."""

        async def lookup(sandbox_id: str) -> Session:
            return self.core.session((await self._live(owner, sandbox_id))[0], "prime.job_status")

        return lookup

    async def _any(self, owner: str, sandbox_id: str) -> PrimeSandbox:
        """A live or ended sandbox of `owner`."""
        rec = await self.core.find_record(sandbox_id, owner)
        if rec is not None and "prime" in rec.attrs:
            return rec.attrs["prime"]
        sb = self.prime.tombstones.get(sandbox_id, owner)
        if sb is None:
            raise E.NotFound(f"Sandbox {sandbox_id} not found")
        return sb

    async def get(self, request: Request, owner: str) -> Response:
        return JSONResponse((await self._any(owner, request.path_params["sandbox_id"])).to_json())

    async def list(self, request: Request, owner: str) -> Response:
        q = request.query_params
        page, per_page = parse_page(q)
        status = q.get("status")
        labels = set(q.getlist("labels"))
        active_only = q.get("is_active", "").lower() == "true"
        live = [r.attrs["prime"] for r in self.core.records(owner) if "prime" in r.attrs]
        ended = [] if active_only else self.prime.tombstones.of(owner)
        chosen = [
            sb
            for sb in sorted(live + ended, key=lambda s: s.created_at, reverse=True)
            if (not status or sb.status == status) and labels <= set(sb.labels)
        ]
        start = (page - 1) * per_page
        return JSONResponse(
            {
                "sandboxes": [sb.to_json() for sb in chosen[start : start + per_page]],
                "total": len(chosen),
                "page": page,
                "perPage": per_page,
                "hasNext": start + per_page < len(chosen),
            }
        )

    async def statuses(self, request: Request, owner: str) -> Response:
        ids = parse_ids(await self._body(request))
        found, errors = [], []
        for sid in ids:
            try:
                found.append((await self._any(owner, sid)).status_json())
            except E.NotFound:
                errors.append({"sandbox_id": sid, "code": "NOT_FOUND", "message": f"Sandbox {sid} not found"})
        return JSONResponse({"statuses": found, "errors": errors})

    async def delete(self, request: Request, owner: str) -> Response:
        rec, _ = await self._live(owner, request.path_params["sandbox_id"])
        await self.core.delete_record(rec, "delete")
        # A JSON body, not 204: clients decode whatever this answers.
        return JSONResponse({})

    async def bulk_delete(self, request: Request, owner: str) -> Response:
        body = await self._body(request)
        if not isinstance(body, dict):
            raise E.InvalidRequest("the body must be a JSON object")
        ids, labels = body.get("sandbox_ids") or [], body.get("labels") or []
        if not isinstance(ids, list) or not isinstance(labels, list):
            raise E.InvalidRequest("sandbox_ids and labels must be lists")
        if not ids and not labels:
            raise E.InvalidRequest("give sandbox_ids and/or labels (refusing to delete everything)")
        chosen: dict[str, Record] = {}
        failed: list[dict[str, str]] = []
        for sid in ids:
            try:
                rec, _ = await self._live(owner, str(sid))
                chosen[rec.id] = rec
            except E.NotFound as e:
                failed.append({"sandbox_id": str(sid), "error": e.message})
        if labels:
            want = set(map(str, labels))
            for rec in self.core.records(owner):
                sb = rec.attrs.get("prime")
                if sb is not None and want <= set(sb.labels):
                    chosen[rec.id] = rec
        await asyncio.gather(*(self.core.delete_record(r, "delete") for r in chosen.values()))
        return JSONResponse(
            {"succeeded": list(chosen), "failed": failed, "message": f"deleted {len(chosen)} sandboxes"}
        )

    async def auth(self, request: Request, owner: str) -> Response:
        rec, sb = await self._live(owner, request.path_params["sandbox_id"])
        return JSONResponse(await self.prime.gateway_auth(request, rec, sb))

    async def logs(self, request: Request, owner: str) -> Response:
        sb = await self._any(owner, request.path_params["sandbox_id"])
        lines = list(sb.log)
        rec = await self.core.find_record(sb.id, owner)
        if rec is not None and sb.start_command is not None:
            try:
                out = await rec.sandbox.read_file(START_LOG, max_bytes=1 << 20)
                lines.append(out.decode("utf-8", "replace"))
            except E.SandboxError:
                pass
        return JSONResponse({"logs": "\n".join(lines)})

    async def error_context(self, request: Request, owner: str) -> Response:
        sb = await self._any(owner, request.path_params["sandbox_id"])
        return JSONResponse(
            {"status": sb.status, "errorType": sb.error_type, "errorMessage": sb.error_message}
        )

    async def get_policy(self, request: Request, owner: str) -> Response:
        _, sb = await self._live(owner, request.path_params["sandbox_id"])
        return JSONResponse(_policy(sb))

    async def set_policy(self, request: Request, owner: str) -> Response:
        rec, sb = await self._live(owner, request.path_params["sandbox_id"])
        policy = parse_policy(await self._body(request))
        await self.core.set_network(rec, policy.egress)  # applied when it returns
        sb.network_allowlist, sb.network_denylist = policy.allowlist, policy.denylist
        sb.policy_generation += 1
        return JSONResponse(_policy(sb))

    async def job_statuses(self, request: Request, owner: str) -> Response:
        body = await self._body(request)
        wanted = body.get("jobs") if isinstance(body, dict) else None
        return JSONResponse(await jobs.statuses(wanted, self._session_of(owner)))


def _policy(sb: PrimeSandbox) -> dict[str, Any]:
    """The policy as the SDK's `EgressPolicyStatus` reads it; every change is applied before its
    call returns, so the applied generation is always the desired one."""
    return {
        "policy": {"allowlist": sb.network_allowlist, "denylist": sb.network_denylist},
        "generation": sb.policy_generation,
        "applied_generation": sb.policy_generation,
        "applied": True,
    }
