"""verifiers 0.4 (`verifiers.v1`) on our server, unmodified: its `PrimeRuntime` reaches sandboxes
through the real `prime-sandboxes` SDK pointed at `sandboxes serve` by PRIME_API_BASE_URL and
PRIME_API_KEY, and the `sandboxes-code` taskset judges with `run_tests` over the server's gRPC
API. The model is the scripted FakeChatServer (real HTTP, OpenAI wire format)."""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any

import pytest
from helpers import http_answering
from sandboxes_code.taskset import use_runtime
from sandboxes_rl.fake_llm import FakeChatServer, fenced
from sandboxes_rl.problems import problem_rows
from sandboxes_rl.runtime import SandboxRuntime
from server_helpers import KEY_A

pytestmark = pytest.mark.asyncio


@pytest.fixture
def prime_env(monkeypatch, tmp_path) -> Any:
    """The SDK's two variables (set when the server is up) and a fresh HOME (its token cache)."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("VF_RUN_ID", "sandboxes-tests")
    monkeypatch.setenv("FAKE_API_KEY", "unused")

    def point_at(server: Any) -> None:
        monkeypatch.setenv("PRIME_API_BASE_URL", f"http://127.0.0.1:{server.http_port}")
        monkeypatch.setenv("PRIME_API_KEY", KEY_A)

    return point_at


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("backend", ["local", "docker"])
async def test_a_prime_runtime_session(make_server, prime_env, request, backend) -> None:
    """start (create, wait, mkdir -p the workdir), run (a background job), write, read, stop; on
    docker in a container of the image asked for, as root with a writable root."""
    from verifiers.v1.runtimes.prime import PrimeConfig, PrimeRuntime

    image = request.getfixturevalue("images") if backend == "docker" else "python:3.11-slim"
    server = await make_server(http_port=0, warm=1, backend=backend)
    prime_env(server)
    rt = PrimeRuntime(PrimeConfig(image=image), name="session")
    await rt.start()
    try:
        assert server.service.registry.get(rt.info.id) is not None
        r = await rt.run(["python3", "-c", "import os; print(os.getcwd(), os.getuid())"], {"X": "1"})
        assert (r.exit_code, r.stdout) == (0, "/app 0\n")
        await rt.write("notes/a.txt", b"written through the gateway")
        assert await rt.read("notes/a.txt") == b"written through the gateway"
        r = await rt.run(["sh", "-c", "cat notes/a.txt; exit 3"], {})
        assert (r.exit_code, r.stdout) == (3, "written through the gateway")
    finally:
        await rt.teardown()
    assert server.service.registry.get(rt.info.id) is None


@pytest.mark.parametrize("backend", ["local", "docker"])
async def test_a_prime_runtime_with_a_restricted_policy(make_server, prime_env, request, backend) -> None:
    """`PrimeConfig(allow=[...])`: set-up runs, then `prepare_execution` replaces the sandbox's
    policy (`set_network`, polled with `get_network` until applied) with the routes' hosts and
    the allow-list; the runtime then reaches the allowed server on this host's loopback
    (127.0.0.2) and is refused another (127.0.0.3)."""
    from verifiers.v1.runtimes.prime import PrimeConfig, PrimeRuntime

    image = request.getfixturevalue("images") if backend == "docker" else "python:3.11-slim"
    fetch = "import sys, urllib.request as u; print(u.urlopen(sys.argv[1], timeout=20).read().decode())"
    async with (
        http_answering(b"allowed", "127.0.0.2") as (port, seen),
        http_answering(b"other", "127.0.0.3") as (other_port, other_seen),
    ):
        server = await make_server(http_port=0, warm=1, backend=backend)
        prime_env(server)
        rt = PrimeRuntime(PrimeConfig(image=image, allow=["127.0.0.2"]), name="restricted")
        assert rt.network_restricted
        await rt.start()
        try:
            await rt.prepare_setup()
            await rt.prepare_execution([f"http://127.0.0.4:{port}/v1"])
            rec = server.service.registry.get(rt.info.id)
            assert server.service.core.network_of(rec).rules == ("127.0.0.4", "127.0.0.2")
            r = await rt.run(["python3", "-c", fetch, f"http://127.0.0.2:{port}/"], {})
            assert (r.exit_code, r.stdout) == (0, "allowed\n"), r
            r = await rt.run(["python3", "-c", fetch, f"http://127.0.0.3:{other_port}/"], {})
            assert r.exit_code != 0 and "403" in r.stderr, r
        finally:
            await rt.teardown()
    assert len(seen) == 1 and not other_seen


@pytest.mark.timeout(600)
async def test_a_prime_runtime_from_a_checkpoint(make_server, prime_env) -> None:
    """`PrimeConfig(checkpoint=...)`: a runtime provisioned from a checkpoint taken with the SDK
    (`checkpoint` + `wait_for_checkpoint`) sees the files written before it, not those after."""
    from prime_sandboxes import AsyncSandboxClient
    from verifiers.v1.runtimes.prime import PrimeConfig, PrimeRuntime

    server = await make_server(http_port=0, warm=1)
    prime_env(server)
    setup = PrimeRuntime(PrimeConfig(image="python:3.11-slim"), name="setup")
    await setup.start()
    try:
        await setup.write("env/ready.txt", b"installed once")
        sdk = AsyncSandboxClient()
        cp = await sdk.wait_for_checkpoint((await sdk.checkpoint(setup.info.id)).id)
        await setup.write("env/later.txt", b"after the checkpoint")
    finally:
        await setup.teardown()
    rt = PrimeRuntime(PrimeConfig(checkpoint=cp.id), name="rollout")
    await rt.start()
    try:
        assert await rt.read("env/ready.txt") == b"installed once"
        r = await rt.run(["sh", "-c", "ls env"], {})
        assert (r.exit_code, r.stdout) == (0, "ready.txt\n")
    finally:
        await rt.teardown()


async def test_a_scripted_humaneval_evaluation_scores_canonical_1_and_broken_0(
    make_server, prime_env, tmp_path
) -> None:
    from verifiers.v1.cli.eval.runner import run_eval
    from verifiers.v1.configs.cli.eval import EvalConfig

    rows = problem_rows("humaneval", num_examples=4)
    ids = [r["info"]["problem_id"] for r in rows]
    canonical = set(ids[:2])
    answers = {r["question"]: (r["info"]["problem_id"], r["answer"]) for r in rows}

    def reply(request: dict, turn: int) -> str:
        prompt = next(m["content"] for m in request["messages"] if m["role"] == "user")
        pid, reference = answers[prompt]
        return "Here it is:\n" + fenced(reference if pid in canonical else "def broken():\n    return None\n")

    server = await make_server(http_port=0, warm=2)
    prime_env(server)
    judge = SandboxRuntime(address=server.address, api_key=KEY_A)
    use_runtime(judge)
    port = free_port()
    try:
        async with FakeChatServer(reply) as llm:
            config = EvalConfig.model_validate(
                {
                    "env": {
                        "taskset": {"id": "sandboxes-code", "problems": "humaneval", "num_examples": 4},
                        "agent": {"runtime": {"type": "prime", "image": "python:3.11-slim"}},
                        "interception": {
                            "type": "server",
                            "tunnel": {"type": "custom", "url": f"http://127.0.0.1:{port}", "port": port},
                        },
                    },
                    "model": "scripted",
                    "client": {"type": "eval", "base_url": llm.url, "api_key_var": "FAKE_API_KEY"},
                    "num_rollouts": 1,
                    "max_concurrent": 4,
                    "push": False,
                    "rich": None,
                    "output_dir": str(tmp_path / "out"),
                }
            )
            episodes = await run_eval(config)
    finally:
        use_runtime(None)
        await asyncio.to_thread(judge.close)
    traces = [t for ep in episodes for t in ep.traces]
    assert len(traces) == 4 and all(t.ok for t in traces), [t.errors for t in traces]
    scores = {}
    for t in traces:
        pid = _task_id(t)
        scores[pid] = (
            t.rewards["pass_rate"].score,
            t.metrics["all_passed"],
            t.metrics["sandbox_ready_wait_s"],
        )
    assert {pid: s[:2] for pid, s in scores.items()} == {
        pid: ((1.0, 1.0) if pid in canonical else (0.0, 0.0)) for pid in ids
    }, scores
    assert all(s[2] > 0 for s in scores.values())  # the runtime's boot, measured per rollout
    assert len(server.service.registry) == 0  # every rollout's sandbox was deleted


def _task_id(trace: Any) -> str:
    data = json.loads(trace.model_dump_json())
    task = data.get("task") or {}
    return task.get("id") or task.get("data", {}).get("id")
