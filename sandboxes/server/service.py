"""The gRPC service `sandboxes.v1.Sandboxes`, backed by a `sandboxes.Pool`.

Every call goes through one wrapper (`_Call`) that authenticates the caller, refuses undecodable
requests, maps `sandboxes.errors` to a status with the exact kind in trailing metadata, and counts
errors. Handlers themselves only validate, look up the caller's sandbox and call the pool / sandbox.

Requests are decoded by our own deserializer: a message gRPC cannot parse (e.g. a string field with
invalid UTF-8) becomes a clear INVALID_ARGUMENT instead of an opaque INTERNAL.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import grpc

from sandboxes import errors as E
from sandboxes._proto import common_pb2 as cpb
from sandboxes._proto import service_pb2 as pb
from sandboxes._proto.convert import (
    dir_entry_to_pb,
    event_to_pb,
    info_to_pb,
    report_to_pb,
    result_to_pb,
)
from sandboxes.server.auth import ApiKeys
from sandboxes.server.metrics import Metrics
from sandboxes.server.quota import Quotas
from sandboxes.server.registry import Record, Registry
from sandboxes.server.shared import Codec, SharedRecords
from sandboxes.server.validation import Bounds, Validator
from sandboxes.status import status_of, trailing_metadata_of
from sandboxes.types import DEFAULT_READ_MAX_BYTES, ReadRange

__all__ = ["SERVICE_NAME", "SandboxService", "ServiceConfig"]

SERVICE_NAME = "sandboxes.v1.Sandboxes"
DRAIN_QUIET_S = 0.25  # a draining server closes once no call came for this long

log = logging.getLogger("sandboxes.server")


@dataclass(frozen=True)
class ServiceConfig:
    default_ttl_s: float | None = None  # TTL of a sandbox created without one (None: none)
    default_claim_timeout_s: float | None = None  # None: the pool's default
    read_chunk_size: int = 1 << 20
    stream_keepalive_s: float = 15.0  # an ExecStream with no event for this long gets a keepalive
    bounds: Bounds = field(default_factory=Bounds)


class _BadRequest:
    """What our deserializer returns for bytes that are not a valid message."""

    def __init__(self, type_name: str, error: Exception) -> None:
        self.message = (
            f"request is not a valid {type_name}: {error or 'parse error'} "
            "(string fields must be valid UTF-8)"
        )


def _deserializer(cls: Any) -> Callable[[bytes], Any]:
    name = cls.DESCRIPTOR.full_name

    def deserialize(data: bytes) -> Any:
        try:
            return cls.FromString(data)
        except Exception as e:  # noqa: BLE001 (DecodeError and friends: answered as INVALID_ARGUMENT)
            return _BadRequest(name, e)

    return deserialize


def _check(request: Any) -> Any:
    if isinstance(request, _BadRequest):
        raise E.InvalidRequest(request.message)
    return request


class SandboxService:
    """Servicer of `sandboxes.v1.Sandboxes`. `handler()` gives the generic handler to add to a server."""

    def __init__(
        self,
        pool: Any,
        auth: ApiKeys,
        *,
        quotas: Quotas | None = None,
        metrics: Metrics | None = None,
        config: ServiceConfig | None = None,
        version: str = "",
    ) -> None:
        self.pool = pool
        self.auth = auth
        self.quotas = quotas or Quotas()
        self.metrics = metrics or Metrics()
        self.config = config = config or ServiceConfig()
        self.validate = Validator(config.bounds)
        self.registry = Registry(self._expire)
        self.version = version
        self.draining = False
        self._active = 0  # calls being served (a draining server waits for them)
        self._idle = asyncio.Event()
        self._idle.set()
        self._last_call = 0.0  # loop time of the latest call
        self._deleting: dict[str, asyncio.Task] = {}
        # The registry shared with the other replicas of a cluster (`join_cluster`).
        self.shared: SharedRecords | None = None
        # How the surfaces' state of a record (`Record.attrs[name]`) crosses replicas.
        self.attr_codecs: dict[str, Codec] = {}
        # Called with (record, reason) as a sandbox leaves the registry (delete, ttl, shutdown...).
        self.on_delete: list[Callable[[Record, str], None]] = []

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        self.registry.start()

    async def join_cluster(self) -> bool:
        """Share the registry with the other replicas of the pool's cluster, when its backend
        keeps records there (`shared.py`); whether it does."""
        for backend in getattr(self.pool, "backends", ()):
            records = backend.records
            if records is not None:
                self.shared = SharedRecords(self.registry, self.pool, records, self._gone, self.attr_codecs)
                self.registry.shared = self.shared
                await records.serve(self.shared)
                return True
        return False

    async def close(self) -> None:
        """Stop the reaper and destroy every claimed sandbox (the pool closes after this). A
        replica of a cluster whose other replicas live leaves its claimed sandboxes to them."""
        self.draining = True
        await self.registry.stop()
        records = list(self.registry)
        if self.shared is not None:
            cluster = self.shared.records
            if cluster.others_alive():
                for rec in records:
                    self.registry.pop(rec.id)
                    if rec.local:
                        self.quotas.release_sandbox(rec.owner)
                    self.pool.detach(rec.sandbox)
                await cluster.hand_over()
                await self.shared.close()
                log.info("left %d sandboxes to the other replicas", len(records))
                return
            await cluster.hand_over()
        await asyncio.gather(*(self._delete(r, "shutdown") for r in records), return_exceptions=True)
        if self.shared is not None:
            await self.shared.close()

    # -- the gRPC plumbing -------------------------------------------------------------------

    def handler(self) -> grpc.GenericRpcHandler:
        u = self._unary
        handlers = {
            "Create": u("Create", self.create, pb.CreateRequest, pb.Sandbox),
            "Get": u("Get", self.get, pb.GetRequest, pb.Sandbox),
            "List": u("List", self.list, pb.ListRequest, pb.ListResponse),
            "Delete": u("Delete", self.delete, pb.DeleteRequest, pb.DeleteResponse),
            "BulkDelete": u("BulkDelete", self.bulk_delete, pb.BulkDeleteRequest, pb.BulkDeleteResponse),
            "Exec": u("Exec", self.exec, pb.ExecRequest, cpb.ExecResult),
            "WriteFiles": u("WriteFiles", self.write_files, pb.WriteFilesRequest, cpb.WriteFilesResponse),
            "ListDir": u("ListDir", self.list_dir, pb.ListDirRequest, cpb.ListDirResponse),
            "Remove": u("Remove", self.remove, pb.RemoveRequest, cpb.RemoveResponse),
            "Info": u("Info", self.info, pb.InfoRequest, pb.InfoResponse),
            "RunTests": u("RunTests", self.run_tests, pb.RunTestsRequest, cpb.RunTestsReport),
            "Health": u("Health", self.health, pb.HealthRequest, pb.HealthResponse, auth_required=False),
            "ReadFile": grpc.unary_stream_rpc_method_handler(
                self._wrap_stream("ReadFile", self.read_file),
                request_deserializer=_deserializer(pb.ReadFileRequest),
                response_serializer=cpb.FileChunk.SerializeToString,
            ),
            "RunTestsBatch": grpc.unary_stream_rpc_method_handler(
                self._wrap_stream("RunTestsBatch", self.run_tests_batch),
                request_deserializer=_deserializer(pb.RunTestsBatchRequest),
                response_serializer=cpb.RunTestsBatchResult.SerializeToString,
            ),
            "ExecStream": grpc.stream_stream_rpc_method_handler(
                self._wrap_stream("ExecStream", self.exec_stream),
                request_deserializer=_deserializer(pb.ExecInput),
                response_serializer=cpb.ExecEvent.SerializeToString,
            ),
        }
        return grpc.method_handlers_generic_handler(SERVICE_NAME, handlers)

    @contextlib.contextmanager
    def _serving(self, method: str):
        """One call being served; a draining server refuses new ones (but Health) untouched."""
        self._last_call = asyncio.get_running_loop().time()
        if self.draining and method != "Health":
            raise E.Draining(
                "the server is shutting down; send the call again (a new connection reaches another replica)"
            )
        self._active += 1
        self._idle.clear()
        try:
            yield
        finally:
            self._active -= 1
            if not self._active:
                self._idle.set()

    async def drain(self, grace: float) -> None:
        """Refuse new calls (`Draining`: clients send them again elsewhere) until the calls being
        served finished and no call came for `DRAIN_QUIET_S` (clients still connected have
        learnt to move before the connection goes), `grace` seconds at most."""
        self.draining = True
        loop = asyncio.get_running_loop()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(grace):
                while True:
                    await self._idle.wait()
                    quiet = loop.time() - self._last_call
                    if quiet >= DRAIN_QUIET_S:
                        return
                    await asyncio.sleep(DRAIN_QUIET_S - quiet)  # a call came: quiet again first

    def _unary(self, name: str, fn: Callable, req_cls: Any, resp_cls: Any, *, auth_required: bool = True):
        async def handle(request: Any, context: grpc.aio.ServicerContext) -> Any:
            try:
                with self._serving(name):
                    try:
                        owner = self.auth.authenticate(context.invocation_metadata())
                    except E.AuthError:
                        if auth_required:
                            raise
                        owner = None
                    return await fn(_check(request), context, owner)
            except Exception as e:  # noqa: BLE001 (every error becomes a status)
                await self._abort(name, context, e)

        return grpc.unary_unary_rpc_method_handler(
            handle,
            request_deserializer=_deserializer(req_cls),
            response_serializer=resp_cls.SerializeToString,
        )

    def _wrap_stream(self, name: str, fn: Callable[..., AsyncIterator]):
        async def handle(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator:
            try:
                with self._serving(name):
                    owner = self.auth.authenticate(context.invocation_metadata())
                    async for item in fn(request, context, owner):
                        yield item
            except Exception as e:  # noqa: BLE001 (every error becomes a status)
                await self._abort(name, context, e)

        return handle

    async def _abort(self, method: str, context: grpc.aio.ServicerContext, exc: Exception) -> None:
        if isinstance(exc, grpc.aio.AbortError):
            raise exc
        if not isinstance(exc, E.SandboxError):
            log.exception("internal error in %s", method, exc_info=exc)
            exc = E.SandboxError(f"internal error in {method}: {type(exc).__name__}: {exc}")
        kind = exc.kind.value
        self.metrics.errors.labels(method, kind).inc()
        log.info(
            "call failed",
            extra={"method": method, "kind": kind, "error": exc.message, "peer": context.peer()},
        )
        await context.abort(status_of(exc), exc.message, trailing_metadata_of(exc))

    # -- helpers -----------------------------------------------------------------------------

    async def record(self, sandbox_id: str, owner: str) -> Record:
        """The caller's record of `sandbox_id`; `NotFound` for an unknown or another owner's one."""
        return await self._record(sandbox_id, owner)

    async def _record(self, sandbox_id: str, owner: str) -> Record:
        sid = self.validate.sandbox_id(sandbox_id)
        rec = await self.registry.find(sid, owner)
        if rec is None:
            raise E.NotFound(f"no sandbox {sid!r}")
        return rec

    def _sandbox_pb(self, rec: Record) -> pb.Sandbox:
        return pb.Sandbox(
            id=rec.id,
            template=rec.template,
            labels=rec.labels,
            created_at=rec.created_at,
            expires_at=rec.expires_at or 0.0,
            state="ready",
        )

    def _templates(self) -> set[str] | None:
        templates = getattr(self.pool, "templates", None)
        if isinstance(templates, dict):
            return set(templates)
        return None

    # -- lifecycle RPCs ----------------------------------------------------------------------

    async def create(self, req: pb.CreateRequest, context: Any, owner: str) -> pb.Sandbox:
        template = self.validate.template(req.template or getattr(self.pool, "default_template", "default"))
        b = self.config.bounds
        rec = await self.claim(
            owner,
            template,
            labels=self.validate.labels(req.labels),
            env=self.validate.env(req.env),
            files=self.validate.files(req.files),
            ttl_s=self.validate.seconds("ttl_s", req.ttl_s, b.max_ttl_s) or self.config.default_ttl_s,
            timeout=self.validate.seconds("timeout_s", req.timeout_s, b.max_claim_timeout_s),
            idempotency_key=req.idempotency_key or None,
        )
        return self._sandbox_pb(rec)

    async def claim(
        self,
        owner: str,
        template: str,
        *,
        labels: dict[str, str] | None = None,
        env: dict[str, str] | None = None,
        files: list[tuple[str, bytes, int]] | None = None,
        ttl_s: float | None = None,
        timeout: float | None = None,
        idempotency_key: str | None = None,
        attrs: dict[str, Any] | None = None,
    ) -> Record:
        """Claim a sandbox of `template` for `owner` and register it: the one way every API
        creates a sandbox (quota, idempotency across retries, TTL). Arguments are validated by
        the caller's surface; `attrs` is what that surface keeps with the record."""
        if self.draining:
            raise E.Cancelled("the server is shutting down")
        known = self._templates()
        if known is not None and template not in known:
            raise E.NotFound(f"unknown template {template!r}; known: {', '.join(sorted(known))}")
        timeout = timeout or self.config.default_claim_timeout_s
        key = idempotency_key
        if key is not None:
            if len(key) > 256:
                raise E.InvalidRequest("idempotency_key is longer than 256 characters")
            existing = self.registry.pending(owner, key)
            if existing is not None:
                return _same_template(await asyncio.shield(existing), template)
            if self.shared is not None and (rec := self.shared.by_key(owner, key)) is not None:
                return _same_template(rec, template)

        self.quotas.acquire_sandbox(owner)
        coro = self._claim(owner, template, labels or {}, env or {}, files or [], ttl_s, timeout, key, attrs)
        if key is None:
            # Without a key nobody can pick the sandbox up later: a cancelled call cancels the claim.
            return await coro
        # With a key the claim outlives this call, so a retry after a lost answer gets the same sandbox.
        task = asyncio.ensure_future(coro)
        self.registry.track(owner, key, task)
        return await asyncio.shield(task)

    async def _claim(self, owner, template, labels, env, files, ttl_s, timeout, key, attrs=None) -> Record:
        """Claim from the pool and register; owns one unit of `owner`'s sandbox quota."""
        started = time.perf_counter()
        try:
            # The pool writes the files and merges the env before handing the sandbox out; a
            # cancelled claim leaves nothing claimed behind.
            sb = await self.pool.claim(
                template=template,
                env=env or None,
                files=_file_map(files) or None,
                labels=labels or None,
                timeout=timeout,
            )
        except BaseException as e:
            self.quotas.release_sandbox(owner)
            if isinstance(e, TimeoutError) and not isinstance(e, E.SandboxError):
                raise E.PoolExhausted(f"no {template!r} sandbox became free in time") from e
            raise
        rec = Record(
            id=sb.id,
            sandbox=sb,
            template=template,
            labels=dict(labels),
            owner=owner,
            idempotency_key=key,
            attrs=dict(attrs or {}),
        )
        if self.shared is not None:
            try:
                won = await self._share(rec, env, ttl_s, timeout)
            except BaseException:
                self.quotas.release_sandbox(owner)
                await self._release_quietly(sb)
                raise
            if won is not rec:  # another replica made this key's sandbox first
                self.quotas.release_sandbox(owner)
                await self._release_quietly(sb)
                return _same_template(won, template)
        self.registry.add(rec, ttl_s)
        self.metrics.claims.labels(template).inc()
        self.metrics.create_latency.labels(template).observe(time.perf_counter() - started)
        self.metrics.live_sandboxes.set(len(self.registry))
        log.info(
            "sandbox created",
            extra={"sandbox_id": rec.id, "template": template, "owner": owner, "ttl_s": ttl_s},
        )
        return rec

    async def _share(self, rec: Record, env: dict, ttl_s: float | None, timeout: float | None) -> Record:
        """Publish a claim to the cluster; with an idempotency key, first bind the key, unless
        another replica bound it first: then its record."""
        assert self.shared is not None
        if rec.idempotency_key is not None:
            winner = await self.shared.records.reserve_key(rec.owner, rec.idempotency_key, rec.id)
            if winner != rec.id:
                return await self.shared.wait_for(winner, timeout or 30.0)
        if ttl_s:
            rec.expires_at = time.time() + ttl_s
        await self.shared.publish(rec, env)
        return rec

    def share_attr(self, name: str, codec: Codec) -> None:
        """Let `Record.attrs[name]` reach the other replicas of a cluster (through `save`)."""
        self.attr_codecs[name] = codec

    async def save(self, rec: Record) -> None:
        """Write `rec` (with its surfaces' state) to the cluster before answering, when shared."""
        if self.shared is not None:
            await self.shared.save(rec)

    async def _gone(self, rec: Record) -> None:
        """A sandbox deleted or lost elsewhere in the cluster leaves this registry."""
        await self._delete(rec, "gone")

    async def _release_quietly(self, sb: Any) -> None:
        try:
            await asyncio.shield(self.pool.release(sb))
        except Exception:
            log.exception("releasing sandbox %s failed", getattr(sb, "id", "?"))

    async def delete_record(self, rec: Record, reason: str) -> bool:
        """Unregister and destroy `rec` (see `_delete`); `reason` is counted and told to the
        `on_delete` listeners."""
        return await self._delete(rec, reason)

    async def _delete(self, rec: Record, reason: str) -> bool:
        """Unregister and destroy; concurrent deletes of one sandbox share the work. Returns
        whether this call removed it."""
        if self.registry.pop(rec.id) is None:
            task = self._deleting.get(rec.id)
            if task is not None:
                await asyncio.shield(task)
            return False
        if self.shared is not None:
            self.shared.deleted(rec.id)
        if rec.local:
            self.quotas.release_sandbox(rec.owner)
        for listener in self.on_delete:
            try:
                listener(rec, reason)
            except Exception:
                log.exception("a delete listener failed for %s", rec.id)
        self.metrics.deletes.labels(reason).inc()
        self.metrics.live_sandboxes.set(len(self.registry))
        task = asyncio.ensure_future(self._release_quietly(rec.sandbox))
        self._deleting[rec.id] = task
        task.add_done_callback(lambda _t: self._deleting.pop(rec.id, None))
        log.info("sandbox deleted", extra={"sandbox_id": rec.id, "owner": rec.owner, "reason": reason})
        # The sandbox is destroyed even if this call is cancelled.
        await asyncio.shield(task)
        return True

    async def _expire(self, rec: Record) -> None:
        await self._delete(rec, "ttl")

    async def get(self, req: pb.GetRequest, context: Any, owner: str) -> pb.Sandbox:
        return self._sandbox_pb(await self._record(req.sandbox_id, owner))

    async def list(self, req: pb.ListRequest, context: Any, owner: str) -> pb.ListResponse:
        labels = self.validate.labels(req.labels, what="label selector")
        recs = sorted(self.registry.select(owner, labels), key=lambda r: (r.created_at, r.id))
        return pb.ListResponse(sandboxes=[self._sandbox_pb(r) for r in recs])

    async def delete(self, req: pb.DeleteRequest, context: Any, owner: str) -> pb.DeleteResponse:
        rec = await self._record(req.sandbox_id, owner)
        await self._delete(rec, "delete")
        return pb.DeleteResponse()

    async def bulk_delete(self, req: pb.BulkDeleteRequest, context: Any, owner: str) -> pb.BulkDeleteResponse:
        if not req.sandbox_ids and not req.labels:
            raise E.InvalidRequest("give sandbox_ids and/or a label selector (refusing to delete everything)")
        for sid in req.sandbox_ids:
            self.validate.sandbox_id(sid)
        labels = self.validate.labels(req.labels, what="label selector")
        chosen: dict[str, Record] = {}
        for sid in req.sandbox_ids:
            rec = await self.registry.find(sid, owner)
            if rec is not None:
                chosen[rec.id] = rec
        if req.labels:
            for rec in self.registry.select(owner, labels):
                chosen[rec.id] = rec
        done = await asyncio.gather(*(self._delete(r, "delete") for r in chosen.values()))
        deleted = [sid for sid, ok in zip(chosen, done) if ok]
        return pb.BulkDeleteResponse(deleted_ids=deleted)

    # -- execution ---------------------------------------------------------------------------

    def _exec_args(self, req: pb.ExecRequest) -> tuple[builtins.list[str], dict]:
        argv = self.validate.argv(req.argv)
        kwargs: dict[str, Any] = {
            "timeout": self.validate.seconds(
                "timeout_s", req.timeout_s, self.config.bounds.max_exec_timeout_s
            ),
            "env": self.validate.env(req.env) or None,
            "cwd": self.validate.path("cwd", req.cwd, required=False) or None,
            "limits": self.validate.limits(req.limits) if req.HasField("limits") else None,
            "keep_descendants": req.keep_descendants,
        }
        return argv, kwargs

    @contextlib.contextmanager
    def _exec_slot(self, owner: str, method: str):
        with self.quotas.exec_slot(owner):
            self.metrics.inflight_execs.inc()
            started = time.perf_counter()
            try:
                yield
            finally:
                self.metrics.inflight_execs.dec()
                self.metrics.exec_latency.labels(method).observe(time.perf_counter() - started)

    async def exec(self, req: pb.ExecRequest, context: Any, owner: str) -> cpb.ExecResult:
        argv, kwargs = self._exec_args(req)
        rec = await self._record(req.sandbox_id, owner)
        with self._exec_slot(owner, "Exec"):
            result = await rec.sandbox.exec(argv, stdin=req.stdin, **kwargs)
        return result_to_pb(result)

    async def exec_stream(
        self, request_iterator: Any, context: Any, owner: str
    ) -> AsyncIterator[cpb.ExecEvent]:
        first = None
        async for msg in request_iterator:
            first = _check(msg)
            break
        if first is None or first.WhichOneof("kind") != "start":
            raise E.InvalidRequest("the first ExecStream message must carry `start`")
        req = first.start
        argv, kwargs = self._exec_args(req)
        if req.stdin:
            raise E.InvalidRequest("ExecStream sends stdin as separate messages, not in `start`")
        rec = await self._record(req.sandbox_id, owner)
        with self._exec_slot(owner, "ExecStream"):
            stream = rec.sandbox.exec_stream(argv, **kwargs)
            pump = asyncio.ensure_future(self._pump_input(request_iterator, stream))
            events = stream.__aiter__()
            next_event: asyncio.Future | None = None
            exited = False
            try:
                while True:
                    next_event = asyncio.ensure_future(events.__anext__())
                    while True:
                        # The input's failure first, whenever it came: during the wait or while
                        # this generator was suspended at a `yield` (the transport taking an event).
                        if pump.done() and (failed := pump.exception()) is not None:
                            raise failed
                        if next_event.done():
                            break
                        waiting = {next_event} if pump.done() else {next_event, pump}
                        done, _ = await asyncio.wait(
                            waiting,
                            timeout=self.config.stream_keepalive_s,
                            return_when=asyncio.FIRST_COMPLETED,
                        )
                        if not done:  # quiet program: tell the client (and proxies) we are alive
                            yield cpb.ExecEvent(keepalive=cpb.ExecEvent.Keepalive())
                    try:
                        ev = next_event.result()
                    except StopAsyncIteration:
                        return
                    if ev.kind == "exit":
                        exited = True
                    yield event_to_pb(ev)
                    if exited:
                        return
            finally:
                # Cancelled call, client error or exit: stop reading input and never leave a task
                # behind; cancelling the native stream resets the call, and the agent kills the
                # program at once.
                if not pump.done():
                    pump.cancel()
                if next_event is not None and not next_event.done():
                    next_event.cancel()
                await _close_stream(stream)
                for task in (pump, next_event):
                    if task is not None:
                        with contextlib.suppress(BaseException):
                            await task

    async def run_tests(self, req: pb.RunTestsRequest, context: Any, owner: str) -> cpb.RunTestsReport:
        """Judge a program in the caller's sandbox; counts as one execution in flight."""
        args = self.validate.run_tests(req)
        rec = await self._record(req.sandbox_id, owner)
        with self._exec_slot(owner, "RunTests"):
            report = await rec.sandbox.run_tests(
                args.source,
                args.tests,
                language=args.language,
                limits=args.limits,
                stop_on_first_failure=args.stop_on_first_failure,
                compare=args.compare,
                float_tolerance=args.float_tolerance,
            )
        self._count_verdicts(args.language, report)
        return report_to_pb(report, excerpt_bytes=args.excerpt_bytes)

    def _count_verdicts(self, language: str, report: Any) -> None:
        for verdict, n in report.verdict_counts().items():
            self.metrics.verdicts.labels(language, verdict).inc(n)

    async def run_tests_batch(
        self, req: Any, context: Any, owner: str
    ) -> AsyncIterator[cpb.RunTestsBatchResult]:
        """Judge many programs in the caller's sandbox, each report as it finishes; counts as one
        execution in flight. Every submission is validated before anything runs."""
        req = _check(req)
        batch = self.validate.run_tests_batch(req)
        rec = await self._record(req.sandbox_id, owner)
        gradings = [a.grading() for a in batch]
        with self._exec_slot(owner, "RunTestsBatch"):
            async with rec.sandbox.run_tests_batch(gradings, parallelism=req.parallelism or 1) as stream:
                async for i, report in stream:
                    self._count_verdicts(batch[i].language, report)
                    yield cpb.RunTestsBatchResult(
                        index=i, report=report_to_pb(report, excerpt_bytes=batch[i].excerpt_bytes)
                    )

    async def _pump_input(self, request_iterator: Any, stream: Any) -> None:
        """Forward the client's stdin / close_stdin / signal messages to the running program.

        A malformed message fails the call. A forward that fails because the program already
        exited does not: the program's fate is reported by its exit event. The end of the client's
        input (half-close) closes the program's stdin.
        """
        async for msg in request_iterator:
            msg = _check(msg)
            kind = msg.WhichOneof("kind")
            if kind == "stdin":
                forward = stream.send_stdin(msg.stdin)
            elif kind == "close_stdin":
                forward = stream.close_stdin()
            elif kind == "signal":
                if not 0 < msg.signal < 65:
                    raise E.InvalidRequest(f"signal {msg.signal} is not a signal number (1-64)")
                forward = stream.signal(msg.signal)
            elif kind == "start":
                raise E.InvalidRequest("ExecStream got a second `start` message")
            else:
                raise E.InvalidRequest("empty ExecInput message")
            await _forward(forward, kind)
        await _forward(stream.close_stdin(), "close_stdin")

    # -- files -------------------------------------------------------------------------------

    async def write_files(
        self, req: pb.WriteFilesRequest, context: Any, owner: str
    ) -> cpb.WriteFilesResponse:
        files = self.validate.files(req.files)
        if not files:
            raise E.InvalidRequest("files is empty")
        rec = await self._record(req.sandbox_id, owner)
        await rec.sandbox.write_files(_file_map(files))
        return cpb.WriteFilesResponse(bytes_written=sum(len(d) for _, d, _ in files))

    async def read_file(self, req: Any, context: Any, owner: str) -> AsyncIterator[cpb.FileChunk]:
        req = _check(req)
        path = self.validate.path("path", req.path)
        chunk = self.validate.chunk_size(req.chunk_size) or self.config.read_chunk_size
        rec = await self._record(req.sandbox_id, owner)
        r = ReadRange.of(req.offset, req.length or None, req.max_bytes or DEFAULT_READ_MAX_BYTES)
        data = await rec.sandbox.read_file(
            path, offset=r.offset, length=r.length or None, max_bytes=r.max_bytes
        )
        total = len(data)
        if total == 0:
            yield cpb.FileChunk(data=b"", offset=0, total_size=0)
            return
        view = memoryview(data)
        for off in range(0, total, chunk):
            yield cpb.FileChunk(data=bytes(view[off : off + chunk]), offset=off, total_size=total)

    async def list_dir(self, req: pb.ListDirRequest, context: Any, owner: str) -> cpb.ListDirResponse:
        path = self.validate.path("path", req.path, required=False) or "."
        rec = await self._record(req.sandbox_id, owner)
        entries = await rec.sandbox.list_dir(path)
        return cpb.ListDirResponse(entries=[dir_entry_to_pb(e) for e in entries])

    async def remove(self, req: pb.RemoveRequest, context: Any, owner: str) -> cpb.RemoveResponse:
        path = self.validate.path("path", req.path)
        rec = await self._record(req.sandbox_id, owner)
        await rec.sandbox.remove(path, recursive=req.recursive)
        return cpb.RemoveResponse()

    async def info(self, req: pb.InfoRequest, context: Any, owner: str) -> pb.InfoResponse:
        rec = await self._record(req.sandbox_id, owner)
        return info_to_pb(await rec.sandbox.info())

    # -- health ------------------------------------------------------------------------------

    async def health(self, req: pb.HealthRequest, context: Any, owner: str | None) -> pb.HealthResponse:
        resp = pb.HealthResponse(status="draining" if self.draining else "serving", version=self.version)
        if owner is None:
            return resp  # unauthenticated probes learn only that the server is up
        for template, fields in (self.pool.stats() or {}).items():
            stats = resp.pools[str(template)]
            if isinstance(fields, dict):
                for k, v in fields.items():
                    if isinstance(v, (int, float)):
                        stats.values[str(k)] = float(v)
        resp.sandboxes = len(self.registry.select(owner))
        return resp


def _same_template(rec: Record, template: str) -> Record:
    if rec.template != template:
        raise E.InvalidRequest(f"idempotency_key was used for a sandbox of template {rec.template!r}")
    return rec


async def _forward(call: Awaitable[Any], what: str) -> None:
    try:
        await call
    except E.SandboxError as e:
        log.debug("exec stream %s not delivered: %s", what, e)


def _file_map(files: list[tuple[str, bytes, int]]) -> dict[str, tuple[bytes, int]]:
    """(path, data, mode) triples -> the `{path: (data, mode)}` map of `Sandbox.write_files`;
    mode 0 on the wire means 0644."""
    return {path: (data, mode or 0o644) for path, data, mode in files}


async def _close_stream(stream: Any) -> None:
    """Stop a sandbox exec stream (the native side kills a program still running)."""
    for name in ("aclose", "cancel", "close"):
        fn = getattr(stream, name, None)
        if fn is None:
            continue
        try:
            res = fn()
            if asyncio.iscoroutine(res):
                await res
        except Exception:
            log.debug("closing an exec stream failed", exc_info=True)
        return
