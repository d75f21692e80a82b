"""The prime-sandboxes-shaped client against a real Server: the SDK users' scenario (create, wait,
execute, upload, read, download, list, get, delete, bulk delete), its errors, and verifiers' own
SandboxEnv (written for that SDK) running on our pool by swapping the client."""

from __future__ import annotations

from typing import Any

import pytest
from rl_fixtures import *
from sandboxes_rl import prime_compat as pc
from sandboxes_rl.prime_compat import (
    AsyncSandboxClient,
    CommandTimeoutError,
    CreateSandboxRequest,
    SandboxFileNotFoundError,
    SandboxNotRunningError,
)
from server_fixtures import *
from server_fixtures import KEY_A

from sandboxes.client import AsyncSandboxClient as GrpcClient


def request(name: str, labels: list[str] | None = None, **kw: Any) -> Any:
    return CreateSandboxRequest(name=name, docker_image="python:3.11-slim", labels=labels or [], **kw)


async def test_sdk_scenario(server, tmp_path) -> None:
    async with AsyncSandboxClient(api_key=KEY_A, address=server.address) as client:
        sb = await client.create(request("job-1", ["run-42"], environment_vars={"MODE": "test"}))
        assert sb.id.startswith("sbx-") and sb.name == "job-1" and sb.labels == ["run-42"]
        assert sb.status == "PROVISIONING"  # create returns at once; the claim runs in the background
        await client.wait_for_creation(sb.id)
        assert (await client.get(sb.id)).status == "RUNNING"

        r = await client.execute_command(sb.id, "echo $MODE; echo oops >&2; exit 3")
        assert (r.stdout, r.stderr, r.exit_code) == ("test\n", "oops\n", 3)
        r = await client.execute_command(sb.id, "pwd && ls", working_dir="/tmp", env={"X": "1"})
        assert r.exit_code == 0 and r.stdout.startswith("/tmp\n")

        up = await client.upload_bytes(sb.id, "/tmp/data/hello.txt", b"hello bytes", "hello.txt")
        assert up.success and up.size == 11 and up.path == "/tmp/data/hello.txt"
        local = tmp_path / "script.py"
        local.write_text("print(sum(range(10)))\n")
        await client.upload_file(sb.id, "/tmp/script.py", str(local))
        assert (await client.execute_command(sb.id, "python3 /tmp/script.py")).stdout == "45\n"

        rf = await client.read_file(sb.id, "/tmp/data/hello.txt")
        assert (rf.content, rf.size, rf.total_size, rf.truncated) == ("hello bytes", 11, 11, False)
        part = await client.read_file(sb.id, "/tmp/data/hello.txt", offset=6, length=3)
        assert (part.content, part.truncated) == ("byt", True)
        await client.download_file(sb.id, "/tmp/data/hello.txt", str(tmp_path / "out" / "h.txt"))
        assert (tmp_path / "out" / "h.txt").read_bytes() == b"hello bytes"

        with pytest.raises(SandboxFileNotFoundError):
            await client.read_file(sb.id, "/tmp/nope.txt")
        with pytest.raises(CommandTimeoutError):
            await client.execute_command(sb.id, "sleep 30", timeout=1)

        others = [await client.create(request(f"job-{i}", ["run-42", "batch"])) for i in (2, 3)]
        lone = await client.create(request("lone", ["other"]))
        listing = await client.list(labels=["run-42"])
        assert {s.id for s in listing.sandboxes} == {sb.id, *(o.id for o in others)}
        assert listing.total == 3 and not listing.has_next
        page = await client.list(per_page=2)
        assert page.total == 4 and len(page.sandboxes) == 2 and page.has_next

        # Another client on the same key finds a created sandbox by its id.
        await client.bulk_wait_for_creation([lone.id, *(o.id for o in others)])
        async with AsyncSandboxClient(api_key=KEY_A, address=server.address) as second:
            assert (await second.get(lone.id)).name == "lone"
            assert (await second.execute_command(lone.id, "echo seen")).stdout == "seen\n"

        deleted = await client.delete(sb.id)
        assert deleted["success"]
        with pytest.raises(SandboxNotRunningError):
            await client.execute_command(sb.id, "true")

        bulk = await client.bulk_delete(labels=["batch"])
        assert sorted(bulk.succeeded) == sorted(o.id for o in others) and bulk.failed == []
        bulk = await client.bulk_delete(sandbox_ids=[lone.id])
        assert bulk.succeeded == [lone.id]
        assert (await client.list()).total == 0

    async with GrpcClient(server.address, KEY_A) as raw:
        assert await raw.list() == []  # nothing left on the server


async def test_delete_while_provisioning_and_unknown_ids(server) -> None:
    async with AsyncSandboxClient(api_key=KEY_A, address=server.address) as client:
        sb = await client.create(request("early"))
        await client.delete(sb.id)  # waits for the claim, then deletes it
        with pytest.raises(pc.APIError):
            await client.get("sbx-does-not-exist")
        with pytest.raises(SandboxNotRunningError):
            await client.wait_for_creation("sbx-does-not-exist")
    async with GrpcClient(server.address, KEY_A) as raw:
        assert await raw.list() == []


async def test_failed_creation_is_an_error_status(make_server) -> None:
    server = await make_server(templates=None, pool_kwargs={"claim_timeout": 60.0})
    async with AsyncSandboxClient(api_key=KEY_A, address=server.address, default_template="no-such") as client:
        sb = await client.create(request("bad"))
        with pytest.raises(SandboxNotRunningError) as e:
            await client.wait_for_creation(sb.id)
        assert e.value.status == "ERROR"
        got = await client.get(sb.id)
        assert got.status == "ERROR" and got.error_type == "not_found"


def test_models_are_the_sdks_when_installed() -> None:
    prime = pytest.importorskip("prime_sandboxes")
    assert pc.HAVE_PRIME_SDK
    assert pc.CreateSandboxRequest is prime.CreateSandboxRequest
    assert pc.CommandResponse is prime.CommandResponse
    assert pc.SandboxNotRunningError is prime.SandboxNotRunningError


async def test_verifiers_sandbox_env_runs_on_our_pool(server, fake_llm) -> None:
    vf = pytest.importorskip("verifiers")
    openai = pytest.importorskip("openai")
    from datasets import Dataset

    def script(req: dict, turn: int) -> Any:
        if turn == 0:
            return {"tool_calls": [{"name": "bash", "arguments": {"command": "python3 -c 'print(6*7)'"}}]}
        return "The answer is 42."

    async def saw_42(state: Any) -> float:
        return 1.0 if any("42" in str(getattr(m, "content", "")) for m in state["completion"]) else 0.0

    llm = await fake_llm(script)
    env = vf.SandboxEnv(
        dataset=Dataset.from_list([{"question": "What is 6*7? Use bash.", "answer": "42"}]),
        rubric=vf.Rubric(funcs=[saw_42]),
        docker_image="python:3.11-slim",
        start_command=None,  # verifiers 0.3.1's default (a str) no longer validates with prime-sandboxes 0.5
    )
    env.sandbox_client = AsyncSandboxClient(api_key=KEY_A, address=server.address)  # the swap
    client = vf.OpenAIChatCompletionsClient(openai.AsyncOpenAI(base_url=llm.url, api_key="x", max_retries=0))
    out = await env.run_rollout(dict(env.get_dataset()[0]), client, "stand-in", {})
    assert out["error"] is None and out["reward"] == 1.0
    assert out["metrics"]["bash_calls"] == 1.0 and out["metrics"]["sandbox_ready_wait_time"] >= 0.0
    assert not env.active_sandboxes
    await env.sandbox_client.aclose()
    async with GrpcClient(server.address, KEY_A) as raw:
        assert await raw.list() == []
