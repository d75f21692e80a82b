"""The gRPC service `sandboxes.v1.Sandboxes`: its verbs, over the server's core (`core.py`).

Each verb validates its request (`validation.py`), finds the caller's record or claims one
through the core, and calls the sandbox; the envelope of every call (serving, auth, decoding,
errors as statuses) is `rpc.py`'s.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable
from dataclasses import asdict, dataclass, field
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
from sandboxes.egress import EgressPolicy
from sandboxes.sandbox import check_terminal
from sandboxes.server import criu
from sandboxes.server.auth import ApiKeys
from sandboxes.server.core import ServerCore, file_map
from sandboxes.server.create import CreateSpec
from sandboxes.server.metrics import Metrics
from sandboxes.server.quota import Quotas
from sandboxes.server.registry import Record
from sandboxes.server.rpc import Calls, check
from sandboxes.server.validation import Bounds
from sandboxes.state.checkpoints import DEFAULT_TTL_S as DEFAULT_CHECKPOINT_TTL_S
from sandboxes.state.checkpoints import MAX_TTL_S as MAX_CHECKPOINT_TTL_S
from sandboxes.types import DEFAULT_READ_MAX_BYTES, ReadRange

__all__ = ["SERVICE_NAME", "SandboxService", "ServiceConfig"]

SERVICE_NAME = "sandboxes.v1.Sandboxes"

log = logging.getLogger("sandboxes.server")


@dataclass(frozen=True)
class ServiceConfig:
    default_ttl_s: float | None = None  # TTL of a sandbox created without one (None: none)
    default_claim_timeout_s: float | None = None  # None: the pool's default
    read_chunk_size: int = 1 << 20
    stream_keepalive_s: float = 15.0  # an ExecStream with no event for this long gets a keepalive
    bounds: Bounds = field(default_factory=Bounds)


class SandboxService:
    """Servicer of `sandboxes.v1.Sandboxes` over `core`. `handler()` gives the generic handler to
    add to a server."""

    def __init__(
        self,
        core: ServerCore,
        auth: ApiKeys,
        *,
        config: ServiceConfig | None = None,
        version: str = "",
    ) -> None:
        self.core = core
        self.auth = auth
        self.config = config or ServiceConfig()
        self.validate = core.validate
        self.version = version
        self.calls = Calls(core, auth)

    # The core's state, as callers of the service see it.
    @property
    def pool(self) -> Any:
        return self.core.pool

    @property
    def registry(self) -> Any:
        return self.core.registry

    @property
    def metrics(self) -> Metrics:
        return self.core.metrics

    @property
    def quotas(self) -> Quotas:
        return self.core.quotas

    def handler(self) -> grpc.GenericRpcHandler:
        c = self.calls
        handlers = {
            "Create": c.unary("Create", self.create, pb.CreateRequest, pb.Sandbox),
            "Get": c.unary("Get", self.get, pb.GetRequest, pb.Sandbox),
            "List": c.unary("List", self.list, pb.ListRequest, pb.ListResponse),
            "Delete": c.unary("Delete", self.delete, pb.DeleteRequest, pb.DeleteResponse),
            "BulkDelete": c.unary(
                "BulkDelete", self.bulk_delete, pb.BulkDeleteRequest, pb.BulkDeleteResponse
            ),
            "Exec": c.unary("Exec", self.exec, pb.ExecRequest, cpb.ExecResult),
            "WriteFiles": c.unary(
                "WriteFiles", self.write_files, pb.WriteFilesRequest, cpb.WriteFilesResponse
            ),
            "ListDir": c.unary("ListDir", self.list_dir, pb.ListDirRequest, cpb.ListDirResponse),
            "Remove": c.unary("Remove", self.remove, pb.RemoveRequest, cpb.RemoveResponse),
            "FileOp": c.unary("FileOp", self.file_op, pb.FileOpRequest, cpb.FileOpResponse),
            "Info": c.unary("Info", self.info, pb.InfoRequest, pb.InfoResponse),
            "RunTests": c.unary("RunTests", self.run_tests, pb.RunTestsRequest, cpb.RunTestsReport),
            "Health": c.unary("Health", self.health, pb.HealthRequest, pb.HealthResponse, probe=True),
            "ReadFile": c.server_stream("ReadFile", self.read_file, pb.ReadFileRequest, cpb.FileChunk),
            "RunTestsBatch": c.server_stream(
                "RunTestsBatch", self.run_tests_batch, pb.RunTestsBatchRequest, cpb.RunTestsBatchResult
            ),
            "ExecStream": c.bidi_stream("ExecStream", self.exec_stream, pb.ExecInput, cpb.ExecEvent),
            "CreateCheckpoint": c.unary(
                "CreateCheckpoint", self.create_checkpoint, pb.CreateCheckpointRequest, pb.Checkpoint
            ),
            "GetCheckpoint": c.unary(
                "GetCheckpoint", self.get_checkpoint, pb.GetCheckpointRequest, pb.Checkpoint
            ),
            "ListCheckpoints": c.unary(
                "ListCheckpoints",
                self.list_checkpoints,
                pb.ListCheckpointsRequest,
                pb.ListCheckpointsResponse,
            ),
            "DeleteCheckpoint": c.unary(
                "DeleteCheckpoint",
                self.delete_checkpoint,
                pb.DeleteCheckpointRequest,
                pb.DeleteCheckpointResponse,
            ),
            "Fork": c.unary("Fork", self.fork, pb.ForkRequest, pb.ForkResponse),
            "Pause": c.unary("Pause", self.pause, pb.PauseRequest, pb.PauseResponse),
            "SetNetwork": c.unary("SetNetwork", self.set_network, pb.SetNetworkRequest, pb.Network),
            "GetNetwork": c.unary("GetNetwork", self.get_network, pb.GetRequest, pb.Network),
            "GetPort": c.unary("GetPort", self.get_port, pb.GetPortRequest, pb.Port),
            "Resume": c.unary("Resume", self.resume, pb.ResumeRequest, pb.ResumeResponse),
            "CreateVolume": c.unary("CreateVolume", self.create_volume, pb.CreateVolumeRequest, pb.Volume),
            "GetVolume": c.unary("GetVolume", self.get_volume, pb.GetVolumeRequest, pb.Volume),
            "ListVolumes": c.unary(
                "ListVolumes", self.list_volumes, pb.ListVolumesRequest, pb.ListVolumesResponse
            ),
            "DeleteVolume": c.unary(
                "DeleteVolume", self.delete_volume, pb.DeleteVolumeRequest, pb.DeleteVolumeResponse
            ),
        }
        return grpc.method_handlers_generic_handler(SERVICE_NAME, handlers)

    def _sandbox_pb(self, rec: Record) -> pb.Sandbox:
        return pb.Sandbox(
            id=rec.id,
            template=rec.template,
            labels=rec.labels,
            created_at=rec.created_at,
            expires_at=rec.expires_at or 0.0,
            state="paused" if rec.state == "paused" else "ready",
        )

    # -- lifecycle RPCs ----------------------------------------------------------------------

    async def create(self, req: pb.CreateRequest, context: Any, owner: str) -> pb.Sandbox:
        template = self.validate.template(req.template or self.core.default_template())
        b = self.config.bounds
        spec = CreateSpec(
            template=template,
            labels=self.validate.labels(req.labels),
            env=self.validate.env(req.env),
            files=self.validate.files(req.files),
            ttl_s=self.validate.seconds("ttl_s", req.ttl_s, b.max_ttl_s) or self.config.default_ttl_s,
            timeout=self.validate.seconds("timeout_s", req.timeout_s, b.max_claim_timeout_s),
            idempotency_key=req.idempotency_key or None,
            checkpoint=req.checkpoint_id or None,
            volumes=self._mounts(req.volumes),
        )
        rec, _ = await self.core.create(owner, spec)
        return self._sandbox_pb(rec)

    # -- volumes -----------------------------------------------------------------------------

    @staticmethod
    def _mounts(mounts: Any) -> dict[str, tuple[str, bool]] | None:
        out: dict[str, tuple[str, bool]] = {}
        for m in mounts:
            if m.path in out:
                raise E.InvalidRequest(f"two volumes at {m.path!r}")
            out[m.path] = (m.volume, m.read_only)
        return out or None

    @staticmethod
    def _volume_pb(v: Any) -> pb.Volume:
        return pb.Volume(
            id=v.id, name=v.name, size_bytes=v.size_bytes, inodes=v.inodes, created_at=v.created_at
        )

    async def create_volume(self, req: pb.CreateVolumeRequest, context: Any, owner: str) -> pb.Volume:
        vol = await self.core.create_volume(
            owner, req.name, size_bytes=req.size_bytes or None, inodes=req.inodes or None
        )
        return self._volume_pb(vol)

    async def get_volume(self, req: pb.GetVolumeRequest, context: Any, owner: str) -> pb.Volume:
        return self._volume_pb(self.core.volume_of(owner, req.volume))

    async def list_volumes(
        self, req: pb.ListVolumesRequest, context: Any, owner: str
    ) -> pb.ListVolumesResponse:
        return pb.ListVolumesResponse(volumes=[self._volume_pb(v) for v in self.core.volumes(owner)])

    async def delete_volume(
        self, req: pb.DeleteVolumeRequest, context: Any, owner: str
    ) -> pb.DeleteVolumeResponse:
        await self.core.delete_volume(owner, req.volume)
        return pb.DeleteVolumeResponse()

    # -- checkpoints -------------------------------------------------------------------------

    @staticmethod
    def _checkpoint_pb(cp: Any) -> pb.Checkpoint:
        return pb.Checkpoint(
            id=cp.id,
            name=cp.name,
            template=cp.template,
            source_sandbox_id=cp.source,
            size_bytes=cp.bytes,
            layers=len(cp.layers),
            created_at=cp.created_at,
            expires_at=cp.expires_at or 0.0,
            memory=cp.memory,
        )

    async def _memory(self, rec: Any, asked: bool) -> bool:
        """`asked`, once checked that `rec`'s running programs can be taken: else the refusal
        names what is missing (no copy of its files alone is made)."""
        if asked and (missing := await self.core.memory_snapshots_missing(rec)):
            raise E.InvalidRequest(f"memory snapshots are not available for this sandbox: {missing}")
        return asked

    async def create_checkpoint(
        self, req: pb.CreateCheckpointRequest, context: Any, owner: str
    ) -> pb.Checkpoint:
        rec = await self.core.record(req.sandbox_id, owner)
        ttl = self.validate.seconds("ttl_s", req.ttl_s, MAX_CHECKPOINT_TTL_S)
        if req.keep and ttl:
            raise E.InvalidRequest("a kept checkpoint has no ttl_s")
        cp = await self.core.checkpoint(
            rec,
            name=req.name,
            ttl_s=None if req.keep else (ttl or DEFAULT_CHECKPOINT_TTL_S),
            memory=await self._memory(rec, req.memory),
        )
        return self._checkpoint_pb(cp)

    async def get_checkpoint(self, req: pb.GetCheckpointRequest, context: Any, owner: str) -> pb.Checkpoint:
        return self._checkpoint_pb(self.core.checkpoint_of(owner, req.checkpoint_id))

    async def list_checkpoints(
        self, req: pb.ListCheckpointsRequest, context: Any, owner: str
    ) -> pb.ListCheckpointsResponse:
        return pb.ListCheckpointsResponse(
            checkpoints=[self._checkpoint_pb(cp) for cp in self.core.checkpoints(owner)]
        )

    async def delete_checkpoint(
        self, req: pb.DeleteCheckpointRequest, context: Any, owner: str
    ) -> pb.DeleteCheckpointResponse:
        await self.core.delete_checkpoint(owner, req.checkpoint_id)
        return pb.DeleteCheckpointResponse()

    async def fork(self, req: pb.ForkRequest, context: Any, owner: str) -> pb.ForkResponse:
        rec = await self.core.record(req.sandbox_id, owner)
        b = self.config.bounds
        recs = await self.core.fork(
            rec,
            req.count,
            labels=self.validate.labels(req.labels) or None,
            ttl_s=self.validate.seconds("ttl_s", req.ttl_s, b.max_ttl_s) or self.config.default_ttl_s,
            memory=await self._memory(rec, req.memory),
        )
        return pb.ForkResponse(sandboxes=[self._sandbox_pb(r) for r in recs])

    async def pause(self, req: pb.PauseRequest, context: Any, owner: str) -> pb.PauseResponse:
        rec = await self.core.record(req.sandbox_id, owner)
        return pb.PauseResponse(changed=await self.core.pause(rec, memory=not req.files_only))

    async def resume(self, req: pb.ResumeRequest, context: Any, owner: str) -> pb.ResumeResponse:
        rec = await self.core.record(req.sandbox_id, owner)
        ttl = self.validate.seconds("ttl_s", req.ttl_s, self.config.bounds.max_ttl_s)
        changed = await self.core.resume(rec, ttl_s=ttl or None)
        return pb.ResumeResponse(changed=changed, sandbox=self._sandbox_pb(rec))

    async def set_network(self, req: pb.SetNetworkRequest, context: Any, owner: str) -> pb.Network:
        rec = await self.core.record(req.sandbox_id, owner)
        await self.core.set_network(rec, EgressPolicy.checked(list(req.network.rules), req.network.deny))
        return self._network_pb(rec)

    async def get_network(self, req: pb.GetRequest, context: Any, owner: str) -> pb.Network:
        return self._network_pb(await self.core.record(req.sandbox_id, owner))

    async def get_port(self, req: pb.GetPortRequest, context: Any, owner: str) -> pb.Port:
        rec = await self.core.record(req.sandbox_id, owner)
        url, host, token = self.core.port_access(rec, req.port)
        return pb.Port(url=url, host=host, token=token)

    def _network_pb(self, rec: Record) -> pb.Network:
        net = self.core.network_of(rec)
        if isinstance(net, EgressPolicy):
            return pb.Network(rules=list(net.rules), deny=net.deny, mode="policy")
        return pb.Network(mode="outside" if net else "none")

    async def get(self, req: pb.GetRequest, context: Any, owner: str) -> pb.Sandbox:
        return self._sandbox_pb(await self.core.record(req.sandbox_id, owner))

    async def list(self, req: pb.ListRequest, context: Any, owner: str) -> pb.ListResponse:
        labels = self.validate.labels(req.labels, what="label selector")
        recs = sorted(self.core.registry.select(owner, labels), key=lambda r: (r.created_at, r.id))
        return pb.ListResponse(sandboxes=[self._sandbox_pb(r) for r in recs])

    async def delete(self, req: pb.DeleteRequest, context: Any, owner: str) -> pb.DeleteResponse:
        rec = await self.core.record(req.sandbox_id, owner)
        await self.core.delete_record(rec, "delete")
        return pb.DeleteResponse()

    async def bulk_delete(self, req: pb.BulkDeleteRequest, context: Any, owner: str) -> pb.BulkDeleteResponse:
        if not req.sandbox_ids and not req.labels:
            raise E.InvalidRequest("give sandbox_ids and/or a label selector (refusing to delete everything)")
        for sid in req.sandbox_ids:
            self.validate.sandbox_id(sid)
        labels = self.validate.labels(req.labels, what="label selector")
        chosen: dict[str, Record] = {}
        for sid in req.sandbox_ids:
            rec = await self.core.registry.find(sid, owner)
            if rec is not None:
                chosen[rec.id] = rec
        if req.labels:
            for rec in self.core.registry.select(owner, labels):
                chosen[rec.id] = rec
        done = await asyncio.gather(*(self.core.delete_record(r, "delete") for r in chosen.values()))
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
            "user": req.user or None,
        }
        if req.HasField("terminal"):
            kwargs["terminal"] = check_terminal(req.terminal.rows, req.terminal.cols)
        return argv, kwargs

    async def exec(self, req: pb.ExecRequest, context: Any, owner: str) -> cpb.ExecResult:
        argv, kwargs = self._exec_args(req)
        if "terminal" in kwargs:
            raise E.InvalidRequest("a terminal is interactive: start it with ExecStream")
        rec = await self.core.record(req.sandbox_id, owner)
        result = await self.core.session(rec, "Exec").exec(argv, stdin=req.stdin, **kwargs)
        return result_to_pb(result)

    async def exec_stream(
        self, request_iterator: Any, context: Any, owner: str
    ) -> AsyncIterator[cpb.ExecEvent]:
        first = None
        async for msg in request_iterator:
            first = check(msg)
            break
        if first is None or first.WhichOneof("kind") != "start":
            raise E.InvalidRequest("the first ExecStream message must carry `start`")
        req = first.start
        argv, kwargs = self._exec_args(req)
        if req.stdin:
            raise E.InvalidRequest("ExecStream sends stdin as separate messages, not in `start`")
        rec = await self.core.record(req.sandbox_id, owner)
        stream = self.core.session(rec, "ExecStream").exec_stream(argv, **kwargs)
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
        rec = await self.core.record(req.sandbox_id, owner)
        report = await self.core.session(rec, "RunTests").run_tests(
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
        req = check(req)
        batch = self.validate.run_tests_batch(req)
        rec = await self.core.record(req.sandbox_id, owner)
        gradings = [a.grading() for a in batch]
        session = self.core.session(rec, "RunTestsBatch")
        async with session.run_tests_batch(gradings, parallelism=req.parallelism or 1) as stream:
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
            msg = check(msg)
            kind = msg.WhichOneof("kind")
            if kind == "stdin":
                forward = stream.send_stdin(msg.stdin)
            elif kind == "close_stdin":
                forward = stream.close_stdin()
            elif kind == "signal":
                if not 0 < msg.signal < 65:
                    raise E.InvalidRequest(f"signal {msg.signal} is not a signal number (1-64)")
                forward = stream.signal(msg.signal)
            elif kind == "resize":
                stream.check_resize(msg.resize.rows, msg.resize.cols)
                forward = stream.resize(msg.resize.rows, msg.resize.cols)
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
        rec = await self.core.record(req.sandbox_id, owner)
        await rec.sandbox.write_files(file_map(files), user=req.user or None)
        return cpb.WriteFilesResponse(bytes_written=sum(len(d) for _, d, _ in files))

    async def read_file(self, req: Any, context: Any, owner: str) -> AsyncIterator[cpb.FileChunk]:
        req = check(req)
        path = self.validate.path("path", req.path)
        chunk = self.validate.chunk_size(req.chunk_size) or self.config.read_chunk_size
        rec = await self.core.record(req.sandbox_id, owner)
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
        rec = await self.core.record(req.sandbox_id, owner)
        entries = await rec.sandbox.list_dir(path, req.depth or 1)
        return cpb.ListDirResponse(entries=[dir_entry_to_pb(e) for e in entries])

    async def file_op(self, req: pb.FileOpRequest, context: Any, owner: str) -> cpb.FileOpResponse:
        verb = req.op.WhichOneof("op")
        if verb is None:
            raise E.InvalidRequest("op names no file operation")
        op = getattr(req.op, verb)
        for name in ("path", "source", "destination"):
            if name in op.DESCRIPTOR.fields_by_name:
                self.validate.path(name, getattr(op, name))
        rec = await self.core.record(req.sandbox_id, owner)
        return await rec.sandbox.file_op(req.op)

    async def remove(self, req: pb.RemoveRequest, context: Any, owner: str) -> cpb.RemoveResponse:
        path = self.validate.path("path", req.path)
        rec = await self.core.record(req.sandbox_id, owner)
        await rec.sandbox.remove(path, recursive=req.recursive)
        return cpb.RemoveResponse()

    async def info(self, req: pb.InfoRequest, context: Any, owner: str) -> pb.InfoResponse:
        rec = await self.core.record(req.sandbox_id, owner)
        return info_to_pb(await rec.sandbox.info())

    # -- health ------------------------------------------------------------------------------

    async def health(self, req: pb.HealthRequest, context: Any, owner: str | None) -> pb.HealthResponse:
        resp = pb.HealthResponse(status="draining" if self.core.draining else "serving", version=self.version)
        if owner is None:
            return resp  # unauthenticated probes learn only that the server is up
        records = self.core.registry.select(owner)
        for template, fields in (self.core.pool.stats() or {}).items():
            if not _shown(self.core.pool, str(template), records):
                continue
            stats = resp.pools[str(template)]
            if isinstance(fields, dict):
                for k, v in fields.items():
                    if isinstance(v, (int, float)):
                        stats.values[str(k)] = float(v)
        resp.sandboxes = len(records)
        if (host_criu := criu.probed()) is not None:
            resp.criu.CopyFrom(pb.Criu(**asdict(host_criu)))
        return resp


def _shown(pool: Any, template: str, records: list[Any]) -> bool:
    """Whether Health shows a key the pool of `template`: one of the server's templates, or a
    pool made for checkpoints' or volumes' sandboxes (`cp-<hash>`, named by their layers and
    volumes) that serves one of the key's sandboxes (`records`), never another key's."""
    t = (getattr(pool, "templates", None) or {}).get(template)
    if t is not None and not getattr(t, "volumes", ()) and not getattr(t, "layered_volumes", ()):
        return True
    return any(getattr(r.sandbox, "template", None) == template for r in records)


async def _forward(call: Awaitable[Any], what: str) -> None:
    """Deliver one validated input message. Its failure means the program has ended (the native
    stream refuses input then), which the exit event reports: the call goes on."""
    try:
        await call
    except E.SandboxError as e:
        log.debug("exec stream %s not delivered: %s", what, e)


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
