"""One error and step vocabulary from the agent to every caller: the Python enums are the Rust
lists, a step that fails in the agent (a program's `chdir`, a start-up `mount`) reaches the
embedded pool's caller, the remote client's and an HTTP caller as the same `Step` and message,
and a sandbox's own process limit is a typed, non-retryable error naming the limit."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import aiohttp
import grpc
import pytest
from server_helpers import KEY_A

import sandboxes
from sandboxes import errors as E
from sandboxes import status
from sandboxes.backends import readiness
from sandboxes.client import AsyncSandboxClient
from sandboxes.server.http.statuses import http_status
from sandboxes.templates import Template

MISSING_DIR = "/no/such/dir"


def test_the_python_enums_are_the_rust_lists(native: Any) -> None:
    assert [s.value for s in E.Step] == native.steps()
    assert [k.value for k in E.ErrorKind] == native.error_kinds()


def test_the_agent_code_table_is_the_servers_but_for_its_named_differences(native: Any) -> None:
    for code in grpc.StatusCode:
        if code is grpc.StatusCode.OK:
            continue
        expected = status.AGENT_CODE_DIFFERS.get(code) or status.CLASS_OF_CODE.get(code, E.SandboxError).kind
        assert native.kind_of_status_code(code.value[0]) == expected.value, code


def test_step_and_limit_travel_in_the_servers_trailers() -> None:
    exc = E.SandboxLimitExceeded("refused", step=E.Step.FORK, limit="pids")
    back = status.error_from_status(status.status_of(exc), exc.message, status.trailing_metadata_of(exc))
    assert type(back) is E.SandboxLimitExceeded and not back.retryable
    assert (back.step, back.limit) == (E.Step.FORK, "pids")
    assert status.status_of(exc) is grpc.StatusCode.RESOURCE_EXHAUSTED and http_status(exc) == 429
    chdir = E.InvalidRequest("no such dir", step="chdir")
    back = status.error_from_status(
        status.status_of(chdir), chdir.message, status.trailing_metadata_of(chdir)
    )
    assert type(back) is E.InvalidRequest and back.step is E.Step.CHDIR
    # A step this side does not know (a newer peer's) is left out, not an error.
    md = ((status.KIND_KEY, "launch"), (status.STEP_KEY, "some_new_step"))
    back = status.error_from_status(grpc.StatusCode.INTERNAL, "x", md)
    assert type(back) is E.LaunchError and back.step is None


def test_a_backend_reads_the_readiness_record() -> None:
    def never() -> str:
        raise AssertionError("read only for an agent that died unreported")

    assert readiness.launch_error(b"R", "agent", never) is None
    e = readiness.launch_error(b"Fmount\nmount /x at /y: No such file", "agent", never)
    assert e is not None and e.step is E.Step.MOUNT and "mount /x at /y" in str(e)
    e = readiness.launch_error(b"Fsome_new_step\nboom", "agent", never)
    assert e is not None and e.step is E.Step.AGENT_START and "some_new_step" in str(e)
    e = readiness.launch_error(b"", "agent", lambda: "killed")
    assert e is not None and e.step is E.Step.AGENT_START and "killed" in str(e)


async def test_a_programs_failed_step_reaches_the_pool_caller(sb: sandboxes.Sandbox) -> None:
    with pytest.raises(E.InvalidRequest) as e:
        await sb.exec(["true"], cwd=MISSING_DIR)
    assert e.value.step is E.Step.CHDIR and "chdir" in str(e.value), e.value
    assert (await sb.exec(["true"])).exit_code == 0


async def test_a_programs_failed_step_reaches_the_remote_and_the_http_caller(make_server: Any) -> None:
    server = await make_server(http_port=0, warm=1)
    async with AsyncSandboxClient(server.address, KEY_A, timeout=60.0) as client:
        sb = await client.create()
        with pytest.raises(E.InvalidRequest) as e:
            await sb.exec(["true"], cwd=MISSING_DIR)
        assert e.value.step is E.Step.CHDIR and "chdir" in str(e.value), e.value
        await sb.close()
    # The same failure through an HTTP surface (Prime's command call): the same message.
    base = f"http://127.0.0.1:{server.http_port}/api/v1/sandbox"
    auth = {"Authorization": f"Bearer {KEY_A}"}
    async with aiohttp.ClientSession() as http:
        r = await http.post(base, json={"name": "n", "docker_image": "python:3.11-slim"}, headers=auth)
        assert r.status == 200, await r.text()
        gw = (await r.json())["gatewayAuth"]
        r = await http.post(
            f"{gw['gateway_url']}/{gw['user_ns']}/{gw['job_id']}/exec",
            json={"command": "true", "working_dir": MISSING_DIR},
            headers={"Authorization": f"Bearer {gw['token']}"},
        )
        body = await r.json()
    assert r.status == http_status(e.value) == 400
    assert e.value.message in str(body), body


BAD_WORK_DIR = "/usr/sbx-work"  # inside the read-only /usr of the root the agent builds


async def test_an_agent_start_up_step_reaches_the_pool_caller(make_pool: Any) -> None:
    """The agent reports its failed start-up step on its readiness channel: here making the work
    directory inside the read-only /usr of the root it builds."""
    pool = await make_pool(warm=0, templates={"bad": Template(name="bad", work_dir=BAD_WORK_DIR)})
    with pytest.raises(E.LaunchError) as e:
        await pool.claim("bad")
    assert e.value.step is E.Step.ROOT_FILE and BAD_WORK_DIR in str(e.value), e.value
    assert "Read-only file system" in str(e.value), e.value


async def test_an_agent_start_up_step_reaches_the_remote_caller(make_server: Any) -> None:
    server = await make_server(warm=0, templates={"bad": Template(name="bad", work_dir=BAD_WORK_DIR)})
    async with AsyncSandboxClient(server.address, KEY_A, timeout=60.0) as client:
        with pytest.raises(E.LaunchError) as e:
            await client.create(template="bad")
    assert e.value.step is E.Step.ROOT_FILE and BAD_WORK_DIR in str(e.value), e.value


async def test_the_sandboxs_process_limit_is_a_typed_error_naming_it(make_pool: Any) -> None:
    """200 programs at once in a sandbox whose process limit is 32: those past it are refused with
    `SandboxLimitExceeded` (limit "pids", not retryable), not an internal error; the sandbox keeps
    serving. Each program (`cat`, its stdin held open) runs until the test closes its stdin."""
    pool = await make_pool(warm=0, templates={"small": Template(name="small", max_pids=32)})
    async with pool.sandbox("small") as sb, contextlib.AsyncExitStack() as streams:

        async def start() -> sandboxes.ExecStream | E.SandboxError:
            stream = await streams.enter_async_context(sb.exec_stream(["cat"]))
            try:
                first = await stream.__anext__()
            except E.SandboxError as err:
                return err
            assert first.kind == "started", first
            return stream

        outcomes = await asyncio.gather(*(start() for _ in range(200)))
        running = [o for o in outcomes if isinstance(o, sandboxes.ExecStream)]
        refused = [o for o in outcomes if isinstance(o, E.SandboxError)]
        assert running and refused
        for err in refused:
            assert type(err) is E.SandboxLimitExceeded, err
            assert (err.limit, err.step, err.retryable) == ("pids", E.Step.FORK, False), err
            assert "process limit" in str(err)
        # While they run, a unary exec is refused the same way.
        with pytest.raises(E.SandboxLimitExceeded) as e:
            await sb.exec(["true"])
        assert e.value.limit == "pids"
        for stream in running:
            await stream.close_stdin()
        for stream in running:
            assert (await stream.wait()).exit_code == 0
        assert (await sb.exec(["echo", "still serving"])).stdout == b"still serving\n"
