"""Bad input on every call gets a clear status, and never hurts the server, the pool or a sandbox.

Malformed requests are sent with the bare generated stub (the client would refuse most of them
before sending). After each, a live sandbox of another request still executes.
"""

from __future__ import annotations

import asyncio
import math

import grpc
import pytest
from server_helpers import KEY_A, bearer, drive_exec_stream

from sandboxes import errors as E
from sandboxes._proto import common_pb2 as cpb
from sandboxes._proto import service_pb2 as pb
from sandboxes.client import AsyncSandboxClient

INVALID = grpc.StatusCode.INVALID_ARGUMENT


async def expect(call, code: grpc.StatusCode, *, kind: str | None = None, says: str = "") -> str:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        r = call()
        if hasattr(r, "__aiter__"):
            async for _ in r:
                pass
        else:
            await r
    err = info.value
    assert err.code() == code, (err.code(), err.details())
    if kind is not None:
        assert dict(err.trailing_metadata() or ())["sandboxes-error-kind"] == kind
    assert says.lower() in (err.details() or "").lower(), err.details()
    return err.details()


@pytest.fixture
def md():
    return bearer(KEY_A)


async def test_bad_requests_on_every_call(server, client: AsyncSandboxClient, raw_stub, md) -> None:
    live = await client.create()
    other = await client.create()
    s = raw_stub
    sid = other.id
    T = {"metadata": md, "timeout": 30}

    async def still_serving() -> None:
        assert (await live.exec(["echo", "alive"])).stdout == b"alive\n"

    cases = [
        # Create
        (
            lambda: s.Create(pb.CreateRequest(template="no-such-template"), **T),
            grpc.StatusCode.NOT_FOUND,
            "template",
        ),
        (lambda: s.Create(pb.CreateRequest(template="bad name!"), **T), INVALID, "template"),
        (lambda: s.Create(pb.CreateRequest(labels={"": "x"}), **T), INVALID, "labels key"),
        (lambda: s.Create(pb.CreateRequest(labels={"k": "v\x00"}), **T), INVALID, "nul"),
        (lambda: s.Create(pb.CreateRequest(env={"1BAD": "x"}), **T), INVALID, "env name"),
        (lambda: s.Create(pb.CreateRequest(ttl_s=-1), **T), INVALID, "ttl_s"),
        (lambda: s.Create(pb.CreateRequest(ttl_s=math.inf), **T), INVALID, "ttl_s"),
        (lambda: s.Create(pb.CreateRequest(timeout_s=math.nan), **T), INVALID, "timeout_s"),
        (lambda: s.Create(pb.CreateRequest(files=[cpb.FileEntry(path="")]), **T), INVALID, "file path"),
        (
            lambda: s.Create(pb.CreateRequest(files=[cpb.FileEntry(path="x", mode=0o177777)]), **T),
            INVALID,
            "mode",
        ),
        # Get / Delete / BulkDelete / List
        (lambda: s.Get(pb.GetRequest(), **T), INVALID, "sandbox_id is required"),
        (lambda: s.Get(pb.GetRequest(sandbox_id="../../etc"), **T), INVALID, "not a valid id"),
        (lambda: s.Get(pb.GetRequest(sandbox_id="sb-nope"), **T), grpc.StatusCode.NOT_FOUND, "no sandbox"),
        (lambda: s.Delete(pb.DeleteRequest(), **T), INVALID, "sandbox_id"),
        (lambda: s.Delete(pb.DeleteRequest(sandbox_id="sb-nope"), **T), grpc.StatusCode.NOT_FOUND, ""),
        (lambda: s.BulkDelete(pb.BulkDeleteRequest(), **T), INVALID, "refusing"),
        (lambda: s.BulkDelete(pb.BulkDeleteRequest(sandbox_ids=[""]), **T), INVALID, "sandbox_id"),
        (lambda: s.List(pb.ListRequest(labels={"bad key!": "x"}), **T), INVALID, "label selector"),
        # Exec
        (lambda: s.Exec(pb.ExecRequest(argv=["true"]), **T), INVALID, "sandbox_id"),
        (lambda: s.Exec(pb.ExecRequest(sandbox_id=sid), **T), INVALID, "argv is empty"),
        (lambda: s.Exec(pb.ExecRequest(sandbox_id=sid, argv=[""]), **T), INVALID, "argv[0]"),
        (lambda: s.Exec(pb.ExecRequest(sandbox_id=sid, argv=["echo", "a\x00b"]), **T), INVALID, "nul"),
        (
            lambda: s.Exec(pb.ExecRequest(sandbox_id=sid, argv=["true"], timeout_s=-5), **T),
            INVALID,
            "timeout_s",
        ),
        (
            lambda: s.Exec(pb.ExecRequest(sandbox_id=sid, argv=["true"], timeout_s=1e12), **T),
            INVALID,
            "maximum",
        ),
        (
            lambda: s.Exec(
                pb.ExecRequest(sandbox_id=sid, argv=["true"], limits=cpb.Limits(memory_bytes=1 << 62)), **T
            ),
            INVALID,
            "memory_bytes",
        ),
        (
            lambda: s.Exec(
                pb.ExecRequest(sandbox_id=sid, argv=["true"], limits=cpb.Limits(wall_time_s=math.nan)), **T
            ),
            INVALID,
            "wall_time_s",
        ),
        (
            lambda: s.Exec(
                pb.ExecRequest(sandbox_id=sid, argv=["true"], limits=cpb.Limits(cpu_time_s=-1)), **T
            ),
            INVALID,
            "cpu_time_s",
        ),
        (
            lambda: s.Exec(
                pb.ExecRequest(sandbox_id=sid, argv=["true"], limits=cpb.Limits(max_pids=1 << 31)), **T
            ),
            INVALID,
            "max_pids",
        ),
        (
            lambda: s.Exec(pb.ExecRequest(sandbox_id=sid, argv=["true"], env={"A=B": "x"}), **T),
            INVALID,
            "env name",
        ),
        (lambda: s.Exec(pb.ExecRequest(sandbox_id=sid, argv=["true"], cwd="a\x00"), **T), INVALID, "cwd"),
        (
            lambda: s.Exec(pb.ExecRequest(sandbox_id="sb-nope", argv=["true"]), **T),
            grpc.StatusCode.NOT_FOUND,
            "",
        ),
        # Files
        (lambda: s.WriteFiles(pb.WriteFilesRequest(sandbox_id=sid), **T), INVALID, "files is empty"),
        (
            lambda: s.WriteFiles(pb.WriteFilesRequest(sandbox_id=sid, files=[cpb.FileEntry(path="")]), **T),
            INVALID,
            "path",
        ),
        (
            lambda: s.WriteFiles(pb.WriteFilesRequest(files=[cpb.FileEntry(path="a")]), **T),
            INVALID,
            "sandbox_id",
        ),
        (lambda: s.ReadFile(pb.ReadFileRequest(sandbox_id=sid), **T), INVALID, "path is required"),
        (
            lambda: s.ReadFile(pb.ReadFileRequest(sandbox_id=sid, path="nope.txt"), **T),
            grpc.StatusCode.NOT_FOUND,
            "",
        ),
        (
            lambda: s.ReadFile(pb.ReadFileRequest(sandbox_id=sid, path="a", chunk_size=1 << 30), **T),
            INVALID,
            "chunk_size",
        ),
        (lambda: s.ListDir(pb.ListDirRequest(sandbox_id=sid, path="x\x00"), **T), INVALID, "nul"),
        (lambda: s.ListDir(pb.ListDirRequest(sandbox_id="sb-nope"), **T), grpc.StatusCode.NOT_FOUND, ""),
        (lambda: s.Remove(pb.RemoveRequest(sandbox_id=sid), **T), INVALID, "path is required"),
        (lambda: s.Info(pb.InfoRequest(), **T), INVALID, "sandbox_id"),
    ]
    for call, code, says in cases:
        await expect(call, code, says=says)
    await still_serving()
    # Nothing above created or destroyed a sandbox.
    assert {x.id for x in await client.list()} == {live.id, other.id}
    assert (await other.exec(["true"])).exit_code == 0
    await live.close()
    await other.close()


async def test_exec_stream_protocol_errors(server, client: AsyncSandboxClient, raw_stub, md) -> None:
    sb = await client.create()

    async def stream(*msgs: pb.ExecInput):
        call = raw_stub.ExecStream(metadata=md, timeout=30)
        for m in msgs:
            await call.write(m)
        await call.done_writing()
        async for _ in call:
            pass

    start = pb.ExecInput(start=pb.ExecRequest(sandbox_id=sb.id, argv=["cat"]))
    await expect(lambda: stream(pb.ExecInput(stdin=b"x")), INVALID, says="first ExecStream message")
    await expect(lambda: stream(), INVALID, says="first ExecStream message")
    await expect(lambda: stream(pb.ExecInput(start=pb.ExecRequest(sandbox_id=sb.id))), INVALID, says="argv")
    await expect(lambda: stream(start, pb.ExecInput(signal=999)), INVALID, says="signal")
    await expect(lambda: stream(start, start), INVALID, says="second")
    assert (await sb.exec(["echo", "ok"])).stdout == b"ok\n"
    await sb.close()


async def test_a_bad_message_read_while_an_event_is_being_sent_fails_the_stream(
    server, client: AsyncSandboxClient
) -> None:
    """A malformed input message read while the server hands an event to the transport (the
    stream's generator suspended at its `yield`) still ends the call with INVALID_ARGUMENT, at
    the next event, instead of being lost while the program waits for stdin that never comes.
    The service's stream is driven directly, so the order is certain."""
    sb = await client.create()
    inputs, events = await drive_exec_stream(server, sb.id, ["cat"])
    await inputs.put(pb.ExecInput(signal=999))  # read and refused while the generator is suspended
    await asyncio.sleep(0.2)
    with pytest.raises(E.InvalidRequest, match="signal"):
        await asyncio.wait_for(events.__anext__(), 10)
    await events.aclose()
    assert (await sb.exec(["echo", "ok"])).stdout == b"ok\n"
    await sb.close()


def _with_bad_utf8(msg, field_number: int) -> bytes:
    """`msg` serialized plus a string field `field_number` holding invalid UTF-8."""
    return msg.SerializeToString() + bytes([(field_number << 3) | 2, 3]) + b"\xff\xfe\xfd"


async def test_invalid_utf8_in_string_fields(server, client: AsyncSandboxClient, raw_stub, md) -> None:
    sb = await client.create()
    channel = raw_stub.channel
    cases = [
        ("Exec", _with_bad_utf8(pb.ExecRequest(sandbox_id=sb.id), 2)),  # argv
        ("Exec", _with_bad_utf8(pb.ExecRequest(argv=["true"]), 1)),  # sandbox_id
        ("Create", _with_bad_utf8(pb.CreateRequest(), 1)),  # template
        ("Get", _with_bad_utf8(pb.GetRequest(), 1)),
        ("ListDir", _with_bad_utf8(pb.ListDirRequest(sandbox_id=sb.id), 2)),
    ]
    for method, payload in cases:
        call = channel.unary_unary(
            f"/sandboxes.v1.Sandboxes/{method}",
            request_serializer=lambda b: b,
            response_deserializer=lambda b: b,
        )
        await expect(
            lambda call=call, payload=payload: call(payload, metadata=md, timeout=30),
            INVALID,
            kind="invalid_request",
            says="UTF-8",
        )
    # Streaming calls too.
    rs = channel.unary_stream(
        "/sandboxes.v1.Sandboxes/ReadFile", request_serializer=lambda b: b, response_deserializer=lambda b: b
    )
    await expect(
        lambda: rs(_with_bad_utf8(pb.ReadFileRequest(sandbox_id=sb.id), 2), metadata=md, timeout=30),
        INVALID,
        says="UTF-8",
    )
    ss = channel.stream_stream(
        "/sandboxes.v1.Sandboxes/ExecStream",
        request_serializer=lambda b: b,
        response_deserializer=lambda b: b,
    )

    async def bad_stream():
        call = ss(metadata=md, timeout=30)
        # ExecInput{start: ExecRequest{argv: [<invalid UTF-8>]}}
        inner = _with_bad_utf8(pb.ExecRequest(), 2)
        await call.write(bytes([(1 << 3) | 2, len(inner)]) + inner)
        await call.done_writing()
        async for _ in call:
            pass

    await expect(bad_stream, INVALID, says="UTF-8")
    assert (await sb.exec(["echo", "ok"])).stdout == b"ok\n"
    await sb.close()


async def test_oversized_request_is_refused_and_server_stays_up(
    server, client: AsyncSandboxClient, raw_stub, md
) -> None:
    sb = await client.create()
    huge = pb.WriteFilesRequest(sandbox_id=sb.id, files=[cpb.FileEntry(path="big", data=b"\0" * (100 << 20))])
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await raw_stub.WriteFiles(huge, metadata=md, timeout=60)
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    # The client maps gRPC's own "message larger than max" to InvalidRequest (retrying cannot help).
    async with AsyncSandboxClient(
        server.address, KEY_A, timeout=60, max_message_bytes=256 << 20
    ) as big_client:
        big_sb = await big_client.get(sb.id)
        with pytest.raises(E.InvalidRequest):
            await big_sb.write_file("big", b"\0" * (100 << 20))
    # The server, the pool and the sandbox are fine.
    assert (await sb.exec(["echo", "ok"])).stdout == b"ok\n"
    other = await client.create()
    assert (await other.exec(["true"])).exit_code == 0
    await sb.close()
    await other.close()


async def test_failing_programs_are_results_not_errors(client: AsyncSandboxClient) -> None:
    sb = await client.create()
    r = await sb.exec(["sh", "-c", "exit 3"])
    assert r.exit_code == 3
    # A program that does not exist is the agent's NotFound, as in embedded mode (not a result).
    with pytest.raises(E.NotFound):
        await sb.exec(["/no/such/program"])
    r = await sb.exec(["sh", "-c", "kill -9 $$"])
    assert r.signal == 9 or r.exit_code != 0
    assert (await sb.exec(["true"])).exit_code == 0
    await sb.close()
