"""Pseudo-terminals: an interactive `bash -i` driven as a terminal emulator would drive it, through
the embedded API and through gRPC (the remote client and a bare stub), with the real agent."""

from __future__ import annotations

import grpc
import pytest
from terminals import drive_bash

import sandboxes
from sandboxes import AsyncSandboxClient, InvalidRequest
from sandboxes._proto import common_pb2 as cpb
from sandboxes._proto import service_pb2 as pb

pytestmark = pytest.mark.asyncio


async def test_bash_on_a_terminal_embedded(sb: sandboxes.Sandbox) -> None:
    await drive_bash(sb)


async def test_bash_on_a_terminal_through_grpc(client: AsyncSandboxClient) -> None:
    sb = await client.create()
    try:
        await drive_bash(sb)
    finally:
        await sb.close()


async def test_a_fast_producer_on_a_terminal_loses_nothing(sb: sandboxes.Sandbox) -> None:
    limits = sandboxes.Limits(max_output_bytes=16 << 20)
    async with sb.exec_stream(["seq", "1", "200000"], terminal=(24, 80), limits=limits) as stream:
        result = await stream.wait()
    assert result.exit_code == 0 and not result.stdout_truncated
    assert result.stdout == "".join(f"{i}\r\n" for i in range(1, 200_001)).encode()


async def test_terminal_requests_are_checked(sb: sandboxes.Sandbox) -> None:
    for bad in [(0, 80), (24, 0), (70000, 80), (24, -1), (24.0, 80), "24x80", (24,)]:
        with pytest.raises(InvalidRequest):
            sb.exec_stream(["true"], terminal=bad)  # type: ignore[arg-type]
    async with sb.exec_stream(["sleep", "30"]) as stream:
        with pytest.raises(InvalidRequest, match="without a terminal"):
            await stream.resize(10, 10)
    # The sandbox is unharmed.
    assert (await sb.exec(["true"])).ok


async def test_raw_grpc_refuses_a_terminal_on_unary_exec_and_a_bad_resize(
    client: AsyncSandboxClient, raw_stub: object
) -> None:
    sb = await client.create()
    try:
        req = pb.ExecRequest(sandbox_id=sb.id, argv=["true"], terminal=cpb.TerminalSize(rows=24, cols=80))
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await raw_stub.Exec(req, metadata=client._metadata)  # type: ignore[attr-defined]
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "ExecStream" in e.value.details()

        async def inputs():  # type: ignore[no-untyped-def]
            yield pb.ExecInput(start=pb.ExecRequest(sandbox_id=sb.id, argv=["sleep", "30"]))
            yield pb.ExecInput(resize=cpb.TerminalSize(rows=10, cols=10))

        call = raw_stub.ExecStream(inputs(), metadata=client._metadata)  # type: ignore[attr-defined]
        with pytest.raises(grpc.aio.AioRpcError) as e:
            async for _ in call:
                pass
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, e.value
        assert (await sb.exec(["true"])).ok
    finally:
        await sb.close()
