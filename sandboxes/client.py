"""The remote client: `AsyncSandboxClient` talks to a `sandboxes serve` server over gRPC.

```python
async with sandboxes.AsyncSandboxClient("localhost:50051", api_key="...") as client:
    sb = await client.create(template="default", labels={"run": "42"})
    r = await sb.exec(["python3", "-c", "print(1)"], timeout=5)
    await sb.close()
```

`RemoteSandbox` is the same `SandboxBase` as the embedded `Sandbox`: code written against one runs
against the other. Failures come back as the exact `sandboxes.errors` class the server raised.

Retries (on a transport-level UNAVAILABLE, with exponential backoff) only where repeating is safe:
Get, List, Health, Info, ReadFile, ListDir, Delete, and Create (always sent with an idempotency key,
generated when the caller gives none). Exec, ExecStream, RunTests, WriteFiles and Remove are never
retried. Every call has a deadline.
"""

from __future__ import annotations

import asyncio
import builtins
import os
import random
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Self

import grpc

from sandboxes import errors as E
from sandboxes._proto import common_pb2 as cpb
from sandboxes._proto import service_pb2 as pb
from sandboxes._proto.convert import (
    dir_entry_from_pb,
    event_from_pb,
    info_from_pb,
    limits_to_pb,
    report_from_pb,
    result_from_pb,
    run_tests_request_to_pb,
)
from sandboxes.egress import EgressPolicy
from sandboxes.grading import GradeStream, batch_deadline
from sandboxes.judging import RunTestsRequest, TestReport
from sandboxes.sandbox import Data, ExecRequest, ExecStream, SandboxBase, as_bytes, check_depth
from sandboxes.state.checkpoints import DEFAULT_TTL_S as DEFAULT_CHECKPOINT_TTL_S
from sandboxes.state.checkpoints import Checkpoint
from sandboxes.state.volumes import Volume
from sandboxes.status import error_from_rpc, is_draining, is_retryable_unavailable
from sandboxes.types import AgentInfo, DirEntry, ExecResult, ReadRange

__all__ = ["ADDRESS_ENV", "API_KEY_ENV", "AsyncSandboxClient", "RemoteSandbox"]

API_KEY_ENV = "SANDBOXES_API_KEY"
ADDRESS_ENV = "SANDBOXES_ADDRESS"

# Deadline of an exec without a wall limit (the sandbox's default limit applies on the server).
_UNBOUNDED_EXEC_DEADLINE_S = 24 * 3600.0
# Network slack added to deadlines whose length the server's own wait defines.
_NETWORK_MARGIN_S = 10.0
# A channel left for a new one (its server drains) finishes its calls within this.
_DRAIN_GRACE_S = 60.0
_closing: set[asyncio.Task[None]] = set()
MAX_MESSAGE_BYTES = 64 << 20


class AsyncSandboxClient:
    """A connection to a sandboxes server. Safe to share between tasks.

    `api_key` defaults to `$SANDBOXES_API_KEY`. `timeout` is the deadline of the short calls;
    `retries` how many times a safe call is repeated after UNAVAILABLE.
    """

    def __init__(
        self,
        address: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = 30.0,
        retries: int = 3,
        backoff_s: float = 0.1,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
        credentials: grpc.ChannelCredentials | None = None,
        options: list[tuple[str, Any]] | None = None,
    ) -> None:
        address = address or os.environ.get(ADDRESS_ENV)
        if not address:
            raise E.InvalidRequest(f"no server address given (argument or ${ADDRESS_ENV})")
        if timeout <= 0 or retries < 0:
            raise E.InvalidRequest("timeout must be > 0 and retries >= 0")
        self.address = address
        self.api_key = api_key if api_key is not None else os.environ.get(API_KEY_ENV)
        self.timeout = float(timeout)
        self.retries = int(retries)
        self.backoff_s = backoff_s
        self._credentials = credentials
        self._options = [
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.max_send_message_length", max_message_bytes),
            # Transparent retries only (no retry policy): a call the server never saw, e.g. one that
            # raced a draining server's GOAWAY, goes again; every other retry is ours, where safe.
            ("grpc.enable_retries", 1),
            # This channel's own connections: a new channel is a new connection, which a load
            # balancer may give to another replica (grpc shares them across channels otherwise).
            ("grpc.use_local_subchannel_pool", 1),
            *(options or []),
        ]
        self._channel: grpc.aio.Channel | None = None
        self._stub: Any = None
        self._metadata: tuple[tuple[str, str], ...] = (
            (("authorization", f"Bearer {self.api_key}"),) if self.api_key else ()
        )

    # -- connection --------------------------------------------------------------------------

    def _connect(self) -> Any:
        if self._stub is None:
            from sandboxes._proto.service_pb2_grpc import SandboxesStub

            if self._credentials is not None:
                self._channel = grpc.aio.secure_channel(
                    self.address, self._credentials, options=self._options
                )
            else:
                self._channel = grpc.aio.insecure_channel(self.address, options=self._options)
            self._stub = SandboxesStub(self._channel)
        return self._stub

    def _reconnect(self, failed: Any) -> None:
        """A new channel (a new connection) in place of `failed`, which finishes its calls."""
        channel = self._channel
        if channel is None or failed is not channel:
            return  # another call reconnected already
        self._channel, self._stub = None, None
        task = asyncio.ensure_future(channel.close(grace=_DRAIN_GRACE_S))
        _closing.add(task)
        task.add_done_callback(_closing.discard)

    async def close(self) -> None:
        """Close the connection (sandboxes live on until deleted or their TTL passes)."""
        if self._channel is not None:
            channel, self._channel, self._stub = self._channel, None, None
            await channel.close()

    async def __aenter__(self) -> Self:
        self._connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- calling -----------------------------------------------------------------------------

    async def _call(
        self,
        method: str,
        request: Any,
        *,
        timeout: float | None = None,
        retry: bool = False,
    ) -> Any:
        """One unary call with a deadline; retried on UNAVAILABLE when `retry`."""
        return await self._retrying(
            lambda: getattr(self._connect(), method)(
                request, timeout=timeout or self.timeout, metadata=self._metadata
            ),
            retry=retry,
        )

    async def _retrying(
        self, attempt: Callable[[], Awaitable[Any]], *, retry: bool, first_try: list | None = None
    ) -> Any:
        n = 0
        while True:
            try:
                if first_try is not None:
                    first_try.append(n == 0)
                self._connect()
                channel = self._channel
                return await attempt()
            except grpc.aio.AioRpcError as e:
                if n < self.retries and is_draining(e):
                    n += 1  # untouched by a server going away: again, on a new connection
                    self._reconnect(channel)
                    continue
                if retry and n < self.retries and is_retryable_unavailable(e):
                    n += 1
                    delay = self.backoff_s * (2 ** (n - 1)) * (0.5 + random.random())
                    await asyncio.sleep(delay)
                    continue
                raise error_from_rpc(e) from e

    # -- lifecycle ---------------------------------------------------------------------------

    async def create(
        self,
        template: str = "default",
        labels: Mapping[str, str] | None = None,
        env: Mapping[str, str] | None = None,
        files: Mapping[str, Data | tuple[Data, int]] | None = None,
        ttl_s: float | None = None,
        idempotency_key: str | None = None,
        *,
        timeout: float | None = None,
        checkpoint: str | Checkpoint | None = None,
        volumes: Mapping[str, str | tuple[str, bool]] | None = None,
    ) -> RemoteSandbox:
        """A ready sandbox of `template`. `timeout` bounds the wait for a free one (default: the
        client's timeout); past it the server answers `PoolExhausted`. Retries reuse one
        idempotency key, so a lost answer never creates a second sandbox. With `checkpoint` (one
        of this key's, or its id) the sandbox is made from it, of its template. `volumes` maps
        paths in the sandbox to this key's volumes (id or name, or `(volume, read_only)`)."""
        wait = float(timeout) if timeout is not None else self.timeout
        req = pb.CreateRequest(
            template=template or "default",
            labels=dict(labels or {}),
            env=dict(env or {}),
            files=_file_entries(files),
            ttl_s=float(ttl_s or 0.0),
            idempotency_key=idempotency_key or uuid.uuid4().hex,
            timeout_s=wait,
            checkpoint_id=checkpoint.id if isinstance(checkpoint, Checkpoint) else (checkpoint or ""),
            volumes=[
                pb.VolumeMount(path=path, volume=ref[0], read_only=ref[1])
                if isinstance(ref, tuple)
                else pb.VolumeMount(path=path, volume=ref)
                for path, ref in (volumes or {}).items()
            ],
        )
        msg = await self._call("Create", req, timeout=wait + _NETWORK_MARGIN_S, retry=True)
        return RemoteSandbox(self, msg)

    async def create_volume(self, name: str, *, size_bytes: int = 0, inodes: int = 0) -> Volume:
        """A new volume of this key's (`size_bytes` / `inodes` 0: the server's defaults)."""
        req = pb.CreateVolumeRequest(name=name, size_bytes=size_bytes, inodes=inodes)
        return _volume(await self._call("CreateVolume", req))

    async def volumes(self) -> list[Volume]:
        """This API key's volumes, oldest first."""
        msg = await self._call("ListVolumes", pb.ListVolumesRequest(), retry=True)
        return [_volume(v) for v in msg.volumes]

    async def get_volume(self, volume: str) -> Volume:
        return _volume(await self._call("GetVolume", pb.GetVolumeRequest(volume=volume), retry=True))

    async def delete_volume(self, volume: str) -> None:
        """Deletes one of this key's volumes (its data goes once no sandbox mounts it)."""
        await self._call("DeleteVolume", pb.DeleteVolumeRequest(volume=volume))

    async def checkpoints(self) -> list[Checkpoint]:
        """This API key's checkpoints, oldest first."""
        msg = await self._call("ListCheckpoints", pb.ListCheckpointsRequest(), retry=True)
        return [_checkpoint(c) for c in msg.checkpoints]

    async def get_checkpoint(self, checkpoint_id: str) -> Checkpoint:
        msg = await self._call(
            "GetCheckpoint", pb.GetCheckpointRequest(checkpoint_id=checkpoint_id), retry=True
        )
        return _checkpoint(msg)

    async def delete_checkpoint(self, checkpoint_id: str) -> None:
        """Deletes one of this key's checkpoints (sandboxes made from it keep running)."""
        await self._call("DeleteCheckpoint", pb.DeleteCheckpointRequest(checkpoint_id=checkpoint_id))

    def sandbox(self, template: str = "default", **kwargs: Any) -> _SandboxContext:
        """`async with client.sandbox(...) as sb:` creates, and deletes on exit."""
        return _SandboxContext(self, template, kwargs)

    async def get(self, sandbox_id: str) -> RemoteSandbox:
        msg = await self._call("Get", pb.GetRequest(sandbox_id=sandbox_id), retry=True)
        return RemoteSandbox(self, msg)

    async def list(self, labels: Mapping[str, str] | None = None) -> list[RemoteSandbox]:
        """This API key's sandboxes whose labels contain every pair of `labels`."""
        msg = await self._call("List", pb.ListRequest(labels=dict(labels or {})), retry=True)
        return [RemoteSandbox(self, s) for s in msg.sandboxes]

    async def delete(self, sandbox_id: str) -> None:
        """Destroy a sandbox. Raises `NotFound` if it does not exist (any more)."""
        first: list[bool] = []
        try:
            await self._retrying(
                lambda: self._connect().Delete(
                    pb.DeleteRequest(sandbox_id=sandbox_id), timeout=self.timeout, metadata=self._metadata
                ),
                retry=True,
                first_try=first,
            )
        except E.NotFound:
            if len(first) > 1:
                return  # an earlier attempt deleted it and its answer was lost
            raise

    async def bulk_delete(
        self, ids: builtins.list[str] | None = None, labels: Mapping[str, str] | None = None
    ) -> builtins.list[str]:
        """Delete the given ids and/or every sandbox matching `labels`; returns the deleted ids."""
        req = pb.BulkDeleteRequest(sandbox_ids=list(ids or []), labels=dict(labels or {}))
        msg = await self._call("BulkDelete", req, retry=True)
        return list(msg.deleted_ids)

    async def health(self) -> dict[str, Any]:
        """{"status", "version", "pools": {template: {stat: value}}, "sandboxes": n, "criu": {"found",
        "version", "ok", "reason"} (the server host's CRIU, which memory snapshots need; None until
        the server has probed it)}."""
        msg = await self._call("Health", pb.HealthRequest(), retry=True)
        return {
            "status": msg.status,
            "version": msg.version,
            "pools": {t: dict(p.values) for t, p in msg.pools.items()},
            "sandboxes": msg.sandboxes,
            "criu": {
                "found": msg.criu.found,
                "version": msg.criu.version,
                "ok": msg.criu.ok,
                "reason": msg.criu.reason,
            }
            if msg.HasField("criu")
            else None,
        }


class _SandboxContext:
    def __init__(self, client: AsyncSandboxClient, template: str, kwargs: dict) -> None:
        self._client, self._template, self._kwargs = client, template, kwargs
        self._sb: RemoteSandbox | None = None

    async def __aenter__(self) -> RemoteSandbox:
        self._sb = await self._client.create(self._template, **self._kwargs)
        return self._sb

    async def __aexit__(self, *exc: object) -> None:
        if self._sb is not None:
            await self._sb.close()


def _file_entries(files: Mapping[str, Any] | None) -> list[cpb.FileEntry]:
    out = []
    for path, value in (files or {}).items():
        data, mode = value if isinstance(value, tuple) else (value, 0)
        out.append(cpb.FileEntry(path=path, data=as_bytes(data, path), mode=int(mode)))
    return out


def _checkpoint(msg: pb.Checkpoint) -> Checkpoint:
    """A checkpoint as the server describes it (its layers stay on the server: `layers` is empty)."""
    return Checkpoint(
        id=msg.id,
        template=msg.template,
        layers=(),
        name=msg.name,
        source=msg.source_sandbox_id,
        bytes=msg.size_bytes,
        created_at=msg.created_at,
        expires_at=msg.expires_at or None,
        memory=msg.memory,
    )


def _volume(msg: pb.Volume) -> Volume:
    return Volume(
        id=msg.id, name=msg.name, size_bytes=msg.size_bytes, inodes=msg.inodes, created_at=msg.created_at
    )


class RemoteSandbox(SandboxBase):
    """A sandbox on a server, reached through an `AsyncSandboxClient`; `close()` deletes it."""

    def __init__(self, client: AsyncSandboxClient, msg: pb.Sandbox) -> None:
        super().__init__(msg.id, msg.template, labels=dict(msg.labels))
        self._client = client
        self.created_at = msg.created_at
        self.expires_at = msg.expires_at or None
        self._closed = False

    def _deadline(self, req: ExecRequest) -> float:
        return (req.deadline_s or _UNBOUNDED_EXEC_DEADLINE_S) + _NETWORK_MARGIN_S

    def _exec_pb(self, req: ExecRequest, stdin: bytes = b"") -> pb.ExecRequest:
        msg = pb.ExecRequest(
            sandbox_id=self.id,
            argv=req.argv,
            env=req.env,
            cwd=req.cwd,
            stdin=stdin,
            keep_descendants=req.keep_descendants,
            user=req.user,
        )
        if req.terminal is not None:
            msg.terminal.rows, msg.terminal.cols = req.terminal
        limits = limits_to_pb(req.limits)
        if limits is not None:
            msg.limits.CopyFrom(limits)
        return msg

    async def _exec(self, req: ExecRequest, stdin: bytes) -> ExecResult:
        msg = await self._client._call("Exec", self._exec_pb(req, stdin), timeout=self._deadline(req))
        return result_from_pb(msg)

    def _exec_stream(self, req: ExecRequest, stdin: bytes | None) -> ExecStream:
        source = _RemoteStream(self._client, self._exec_pb(req), self._deadline(req))
        return ExecStream(source, stdin=stdin, terminal=req.terminal is not None)

    async def _run_tests(self, req: RunTestsRequest) -> TestReport:
        # `run_tests` (shared with the embedded Sandbox) validated the request and derived its
        # deadline from cases x wall limit + compile and per-case margins. Without a wall limit
        # the server's template default applies, unknown here: bounded like an unlimited exec.
        deadline = (
            req.deadline_s if req.limits.wall_time_s else max(req.deadline_s, _UNBOUNDED_EXEC_DEADLINE_S)
        )
        msg = await self._client._call(
            "RunTests", run_tests_request_to_pb(self.id, req), timeout=deadline + _NETWORK_MARGIN_S
        )
        return report_from_pb(msg)

    def _run_tests_batch(self, reqs: list[RunTestsRequest], parallelism: int = 1) -> GradeStream:
        msg = pb.RunTestsBatchRequest(
            sandbox_id=self.id,
            submissions=[run_tests_request_to_pb("", r) for r in reqs],
            parallelism=parallelism,
        )
        unbounded = any(not r.limits.wall_time_s for r in reqs)
        deadline = batch_deadline(reqs) + (_UNBOUNDED_EXEC_DEADLINE_S if unbounded else 0.0)
        return GradeStream(_RemoteBatch(self._client, msg, deadline + _NETWORK_MARGIN_S), len(reqs))

    async def _write_files(self, files: list[tuple[str, bytes, int]], user: str = "") -> None:
        req = pb.WriteFilesRequest(
            sandbox_id=self.id,
            files=[cpb.FileEntry(path=p, data=d, mode=m) for p, d, m in files],
            user=user,
        )
        await self._client._call("WriteFiles", req)

    async def _read_file(self, path: str, r: ReadRange) -> bytes:
        req = pb.ReadFileRequest(
            sandbox_id=self.id, path=path, offset=r.offset, length=r.length, max_bytes=r.max_bytes
        )
        client = self._client

        async def attempt() -> bytes:
            buf = bytearray()
            call = client._connect().ReadFile(req, timeout=client.timeout, metadata=client._metadata)
            async for chunk in call:
                buf += chunk.data
                if len(buf) > r.max_bytes:
                    call.cancel()
                    raise E.TooLarge(f"{path}: the server sent more than the limit of {r.max_bytes} bytes")
            return bytes(buf)

        return await client._retrying(attempt, retry=True)

    async def list_dir(self, path: str = ".", depth: int = 1) -> list[DirEntry]:
        msg = await self._client._call(
            "ListDir", pb.ListDirRequest(sandbox_id=self.id, path=path, depth=check_depth(depth)), retry=True
        )
        return [dir_entry_from_pb(e) for e in msg.entries]

    async def file_op(self, op: cpb.FileOpRequest) -> cpb.FileOpResponse:
        # Reads are retried; a change is not (a move that happened must not be made again).
        retry = op.WhichOneof("op") in ("stat", "find", "search")
        return await self._client._call("FileOp", pb.FileOpRequest(sandbox_id=self.id, op=op), retry=retry)

    async def remove(self, path: str, recursive: bool = False) -> None:
        await self._client._call(
            "Remove", pb.RemoveRequest(sandbox_id=self.id, path=path, recursive=recursive)
        )

    async def info(self) -> AgentInfo:
        return info_from_pb(await self._client._call("Info", pb.InfoRequest(sandbox_id=self.id), retry=True))

    async def checkpoint(
        self, *, name: str = "", ttl_s: float | None = DEFAULT_CHECKPOINT_TTL_S, memory: bool = False
    ) -> Checkpoint:
        """This sandbox's file system now, as a checkpoint of this key's (kept `ttl_s`, None:
        until deleted); it keeps running. With `memory`, its running programs too: each sandbox
        made from it runs them on."""
        req = pb.CreateCheckpointRequest(
            sandbox_id=self.id, name=name, ttl_s=float(ttl_s or 0.0), keep=ttl_s is None, memory=memory
        )
        return _checkpoint(await self._client._call("CreateCheckpoint", req))

    async def fork(
        self,
        n: int = 1,
        *,
        labels: Mapping[str, str] | None = None,
        ttl_s: float | None = None,
        memory: bool = False,
    ) -> list[RemoteSandbox]:
        """`n` new sandboxes of this sandbox's file system now, each with writes of its own; with
        `memory`, its running programs run on in each."""
        req = pb.ForkRequest(
            sandbox_id=self.id, count=n, labels=dict(labels or {}), ttl_s=float(ttl_s or 0.0), memory=memory
        )
        msg = await self._client._call("Fork", req, timeout=self._client.timeout + _NETWORK_MARGIN_S)
        return [RemoteSandbox(self._client, s) for s in msg.sandboxes]

    async def pause(self, *, files_only: bool = False) -> bool:
        """Stop every process of the sandbox where it runs (no CPU; memory, files and
        connections kept); calls to it raise `SandboxPaused` until `resume`. Its TTL stops
        meanwhile. With `files_only` its processes end and only its files are kept: `resume`
        starts it anew from them. False when it was paused already."""
        req = pb.PauseRequest(sandbox_id=self.id, files_only=files_only)
        msg = await self._client._call("Pause", req, retry=True)
        return msg.changed

    async def resume(self, *, ttl_s: float | None = None) -> bool:
        """Continue a paused sandbox; its TTL runs again (`ttl_s` from now, else what was left
        at the pause). False when it was not paused."""
        req = pb.ResumeRequest(sandbox_id=self.id, ttl_s=float(ttl_s or 0.0))
        msg = await self._client._call("Resume", req, retry=True)
        self.expires_at = msg.sandbox.expires_at or None
        return msg.changed

    async def set_network(
        self, *, allow: Sequence[str] | None = None, deny: Sequence[str] | None = None
    ) -> EgressPolicy:
        """Replace the sandbox's egress policy (`Sandbox.set_network`): `allow` is all it may
        reach from now on, or `deny` what it may not (every other public destination open)."""
        policy = EgressPolicy.of(allow, deny)
        net = pb.Network(rules=list(policy.rules), deny=policy.deny)
        await self._client._call(
            "SetNetwork", pb.SetNetworkRequest(sandbox_id=self.id, network=net), retry=True
        )
        return policy

    async def port_url(self, port: int) -> str:
        """A URL that reaches `port` of the sandbox from outside (what a program listens on
        there, HTTP or WebSocket): the server's ports listener, the sandbox's token in its path.
        Anyone with the URL reaches the port while the sandbox lives."""
        msg = await self._client._call(
            "GetPort", pb.GetPortRequest(sandbox_id=self.id, port=port), retry=True
        )
        return str(msg.url)

    async def port_host(self, port: int) -> tuple[str, str]:
        """(host name, token): the `Host` that routes to `port` of the sandbox, and the token to
        send in `X-Sandbox-Token`."""
        msg = await self._client._call(
            "GetPort", pb.GetPortRequest(sandbox_id=self.id, port=port), retry=True
        )
        return str(msg.host), str(msg.token)

    async def network(self) -> EgressPolicy | bool:
        """The sandbox's egress policy now; False (none) or True (the outside's) for a sandbox
        whose network cannot change."""
        msg = await self._client._call("GetNetwork", pb.GetRequest(sandbox_id=self.id), retry=True)
        if msg.mode == "policy":
            return EgressPolicy(tuple(msg.rules), deny=msg.deny)
        return msg.mode == "outside"

    async def close(self) -> None:
        """Delete the sandbox on the server. Idempotent (an already deleted one is fine)."""
        if self._closed:
            return
        try:
            await self._client.delete(self.id)
        except E.NotFound:
            pass
        self._closed = True

    async def __aenter__(self) -> Self:
        return self


_READ_AHEAD = 64  # events a stream's reader takes in before its caller reads them


class _RemoteBatch:
    """The `GradeStream` source of a remote batch: one server-streaming RunTestsBatch call,
    started on the first read; gRPC errors leave as `sandboxes.errors`. `cancel()` cancels the
    call, and the server kills what runs."""

    def __init__(
        self, client: AsyncSandboxClient, request: pb.RunTestsBatchRequest, deadline_s: float
    ) -> None:
        self._client, self._request, self._deadline_s = client, request, deadline_s
        self._call: Any = None

    async def next(self) -> tuple[int, TestReport] | None:
        c = self._client
        if self._call is None:
            self._call = c._connect().RunTestsBatch(
                self._request, timeout=self._deadline_s, metadata=c._metadata
            )
        try:
            msg = await self._call.read()
        except grpc.aio.AioRpcError as e:
            raise error_from_rpc(e) from e
        if msg is grpc.aio.EOF:
            return None
        return msg.index, report_from_pb(msg.report)

    def cancel(self) -> None:
        if self._call is not None:
            self._call.cancel()


class _RemoteStream:
    """The `ExecStream` source of a remote exec: one bidirectional ExecStream call.

    The call starts lazily (first event read or first input sent) with the `start` message; gRPC
    errors leave as `sandboxes.errors`. `cancel()` cancels the call, and the server kills the program.

    One task reads the call from its start and queues what arrives: a read is always pending, so
    the exit event is taken in as soon as it arrives. A write that races the end of the call (the
    program exited while the caller sent input) fails in gRPC's core, which then marks the whole
    call failed; the exit event already taken in still reaches the caller, and a failure after
    the exit event is the end of the stream, not an error of it.
    """

    def __init__(self, client: AsyncSandboxClient, start: pb.ExecRequest, deadline_s: float) -> None:
        self._client = client
        self._start = start
        self._deadline_s = deadline_s
        self._call: Any = None
        self._lock = asyncio.Lock()
        self._cancelled = False
        # An event, or the end: None (clean) or the error. The reader reads ahead at most
        # `_READ_AHEAD` events: output a caller does not read yet waits in gRPC's flow control.
        self._events: asyncio.Queue[cpb.ExecEvent | BaseException | None] = asyncio.Queue()
        self._room = asyncio.Semaphore(_READ_AHEAD)
        self._reader: asyncio.Task[None] | None = None

    async def _ensure(self) -> Any:
        if self._call is None:
            async with self._lock:
                if self._call is None:
                    if self._cancelled:
                        raise E.Cancelled("exec stream was cancelled")
                    call = self._client._connect().ExecStream(
                        timeout=self._deadline_s, metadata=self._client._metadata
                    )
                    await self._guard(call.write(pb.ExecInput(start=self._start)))
                    self._call = call
                    self._reader = asyncio.ensure_future(self._read_all(call))
        return self._call

    async def _read_all(self, call: Any) -> None:
        exited = False
        end: BaseException | None = None
        try:
            while True:
                await self._room.acquire()
                msg = await call.read()
                if msg is grpc.aio.EOF:
                    break
                self._events.put_nowait(msg)
                exited = exited or msg.HasField("exit")
        except grpc.aio.AioRpcError as e:
            end = None if exited else error_from_rpc(e)
        except asyncio.CancelledError:
            end = None if exited else E.Cancelled("exec stream was cancelled")
        except Exception as e:  # noqa: BLE001 - whatever ends the read ends the stream, typed
            end = None if exited else E.SandboxLost(f"exec stream failed: {e}")
        self._events.put_nowait(end)

    async def _guard(self, aw: Awaitable[Any]) -> Any:
        try:
            return await aw
        except grpc.aio.AioRpcError as e:
            raise error_from_rpc(e) from e
        except asyncio.InvalidStateError as e:  # writing after the call finished
            raise E.SandboxLost(f"exec stream already finished: {e}") from None

    async def _write(self, msg: pb.ExecInput) -> None:
        call = await self._ensure()
        try:
            await self._guard(call.write(msg))
        except E.SandboxError:
            # The call ended (the program exited): its real status comes from the reads; a write
            # after the end is not an infrastructure failure of its own.
            if call.done():
                return
            raise

    async def next(self) -> Any | None:
        await self._ensure()
        item = await self._events.get()
        if item is None or isinstance(item, BaseException):
            self._events.put_nowait(item)  # every later read sees the end too
            if item is not None:
                raise item
            return None
        self._room.release()
        return event_from_pb(item)

    async def send_stdin(self, data: bytes) -> None:
        await self._write(pb.ExecInput(stdin=data))

    async def close_stdin(self) -> None:
        await self._write(pb.ExecInput(close_stdin=True))

    async def signal(self, signo: int) -> None:
        await self._write(pb.ExecInput(signal=signo))

    async def resize(self, rows: int, cols: int) -> None:
        await self._write(pb.ExecInput(resize=cpb.TerminalSize(rows=rows, cols=cols)))

    def cancel(self) -> None:
        self._cancelled = True
        if self._call is not None:
            self._call.cancel()
        if self._reader is not None:
            self._reader.cancel()
