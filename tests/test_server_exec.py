"""Execution through the real server: streaming with stdin and signals, and cancellation killing
the program (checked from outside with pgrep)."""

from __future__ import annotations

import asyncio
import signal
import uuid

import pytest
from helpers import pgrep
from server_helpers import bearer, drive_exec_stream, wait_for

from sandboxes import errors as E
from sandboxes._proto import service_pb2 as pb
from sandboxes.client import AsyncSandboxClient
from sandboxes.types import Limits


def marker() -> str:
    return f"sbx-marker-{uuid.uuid4().hex}"


async def test_exec_stdin_and_limits(client: AsyncSandboxClient) -> None:
    sb = await client.create()
    r = await sb.exec(["cat"], stdin=b"from stdin")
    assert r.stdout == b"from stdin"
    r = await sb.exec(["sh", "-c", "head -c 100000 /dev/zero"], limits=Limits(max_output_bytes=1000))
    assert r.stdout_truncated and len(r.stdout) <= 1000
    await sb.close()


async def test_exec_stream_interactive(client: AsyncSandboxClient) -> None:
    sb = await client.create()
    async with sb.exec_stream(["sh", "-c", "read line; echo got:$line; echo err >&2; exit 7"]) as stream:
        out, err, started, result = b"", b"", None, None
        await stream.send_stdin(b"hello\n")
        async for ev in stream:
            if ev.kind == "started":
                started = ev.pid
            elif ev.kind == "stdout":
                out += ev.data
            elif ev.kind == "stderr":
                err += ev.data
            elif ev.kind == "exit":
                result = ev.result
    assert started is not None
    assert out == b"got:hello\n" and err == b"err\n"
    assert result is not None and result.exit_code == 7
    await sb.close()


async def test_exec_stream_close_stdin_and_wait(client: AsyncSandboxClient) -> None:
    sb = await client.create()
    stream = sb.exec_stream(["cat"], stdin=b"abc")
    r = await stream.wait()
    assert r.exit_code == 0 and r.stdout == b"abc"
    await sb.close()


async def test_exec_stream_signal(client: AsyncSandboxClient) -> None:
    sb = await client.create()
    m = marker()
    async with sb.exec_stream(["sh", "-c", "sleep 1000", m]) as stream:
        async for ev in stream:
            if ev.kind == "started":
                await wait_for(lambda: pgrep(m), "program to start")
                await stream.signal(signal.SIGTERM)
            elif ev.kind == "exit":
                assert ev.result.signal == signal.SIGTERM or ev.result.exit_code != 0
    await wait_for(lambda: not pgrep(m), "signalled program to exit")
    await sb.close()


async def test_cancel_exec_kills_program(client: AsyncSandboxClient) -> None:
    sb = await client.create()
    m = marker()
    task = asyncio.ensure_future(sb.exec(["sh", "-c", "sleep 1000", m]))
    await wait_for(lambda: pgrep(m), "program to start")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await wait_for(lambda: not pgrep(m), "cancelled program to be killed")
    # The sandbox is fine afterwards.
    assert (await sb.exec(["echo", "ok"])).stdout == b"ok\n"
    await sb.close()


async def test_cancel_exec_stream_kills_program(client: AsyncSandboxClient) -> None:
    sb = await client.create()
    m = marker()
    async with sb.exec_stream(["sh", "-c", "sleep 1000", m]) as stream:
        async for ev in stream:
            if ev.kind == "started":
                break
        await wait_for(lambda: pgrep(m), "program to start")
    await wait_for(lambda: not pgrep(m), "program of the closed stream to be killed")
    assert (await sb.exec(["true"])).exit_code == 0
    await sb.close()


async def test_client_deadline_kills_program(server, client: AsyncSandboxClient) -> None:
    """An RPC deadline that passes (not the program's own limit) also kills the program."""
    sb = await client.create()
    m = marker()
    with pytest.raises(E.SandboxTimeout):
        await client._call(
            "Exec", pb.ExecRequest(sandbox_id=sb.id, argv=["sh", "-c", "sleep 1000", m]), timeout=1.0
        )
    await wait_for(lambda: not pgrep(m), "program past its deadline to be killed")
    await sb.close()


async def test_deleting_sandbox_ends_running_exec(client: AsyncSandboxClient) -> None:
    sb = await client.create()
    m = marker()
    task = asyncio.ensure_future(sb.exec(["sh", "-c", "sleep 1000", m]))
    await wait_for(lambda: pgrep(m), "program to start")
    await client.delete(sb.id)
    with pytest.raises(E.SandboxError):
        await task
    await wait_for(lambda: not pgrep(m), "program of the deleted sandbox to die")


async def test_exec_stream_half_close_closes_stdin(server, raw_stub) -> None:
    """A client that ends its input stream (half-close) gives the program EOF on stdin."""
    created = await raw_stub.Create(pb.CreateRequest(), metadata=bearer(), timeout=60)
    call = raw_stub.ExecStream(metadata=bearer(), timeout=60)
    await call.write(pb.ExecInput(start=pb.ExecRequest(sandbox_id=created.id, argv=["cat"])))
    await call.write(pb.ExecInput(stdin=b"last words"))
    await call.done_writing()
    out, exit_event = b"", None
    async for ev in call:
        if ev.WhichOneof("kind") == "stdout":
            out += ev.stdout
        elif ev.WhichOneof("kind") == "exit":
            exit_event = ev.exit
    assert out == b"last words" and exit_event is not None and exit_event.exit_code == 0
    await raw_stub.Delete(pb.DeleteRequest(sandbox_id=created.id), metadata=bearer(), timeout=60)


async def test_stdin_after_exit_does_not_fail_the_stream(client: AsyncSandboxClient) -> None:
    sb = await client.create()
    async with sb.exec_stream(["true"]) as stream:
        result = None
        async for ev in stream:
            if ev.kind == "exit":
                result = ev.result
            else:
                await stream.send_stdin(b"nobody reads this")
    assert result is not None and result.exit_code == 0
    await sb.close()


async def test_input_after_the_agent_ended_the_stream_leaves_the_exit_event(server, client) -> None:
    """Stdin that reaches the server after the agent's stream has ended (the program exited),
    before the exit event is out, is dropped: the call still ends with the exit event. The
    service's stream is driven directly, so the order is certain (through a real client the
    race is a matter of timing)."""
    sb = await client.create()
    inputs, events = await drive_exec_stream(server, sb.id, ["true"])
    await asyncio.sleep(0.5)  # `true` exits and the agent's stream ends meanwhile
    for msg in (pb.ExecInput(stdin=b"late"), pb.ExecInput(signal=signal.SIGCONT)):
        await inputs.put(msg)
    await asyncio.sleep(0.2)  # forwarded (and refused by the ended stream) before the next event
    kinds = []
    async for ev in events:
        kinds.append(ev.WhichOneof("kind"))
        if kinds[-1] == "exit":
            assert ev.exit.exit_code == 0, ev
    assert kinds[-1] == "exit", kinds
    await inputs.put(None)
    await sb.close()
