"""The verifiers environment: complete multi-turn rollouts against a scripted model (real HTTP, the
real OpenAI client, verifiers' own client and rollout loop) and our pool; infrastructure failures
are raised as verifiers' SandboxError and never scored."""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest

vf = pytest.importorskip("verifiers")
openai = pytest.importorskip("openai")

from rl_fixtures import *
from rl_fixtures import N_HUMANEVAL, solver_for
from sandboxes_rl.fake_llm import code_agent_script
from sandboxes_rl.overlap import PoolProvider
from sandboxes_rl.verifiers_env import SandboxCodeEnv, SandboxInfraError, load_environment
from server_fixtures import *
from server_fixtures import KEY_A

import sandboxes
from sandboxes.client import AsyncSandboxClient

BROKEN = {"HumanEval/1", "HumanEval/4", "HumanEval/7", "HumanEval/12", "HumanEval/19"}


def vf_client(llm: Any) -> Any:
    return vf.OpenAIChatCompletionsClient(openai.AsyncOpenAI(base_url=llm.url, api_key="unused", max_retries=0))


def outputs_of(results: Any) -> list[dict[str, Any]]:
    return list(results["outputs"] if isinstance(results, dict) else results.outputs)


async def test_rollouts_on_humaneval_with_tools(fake_llm, humaneval_subset) -> None:
    llm = await fake_llm(code_agent_script(solver_for(humaneval_subset, BROKEN)), ttft_s=0.02)
    env = load_environment(dataset="humaneval", num_examples=N_HUMANEVAL, warm=4)
    try:
        ds = env.get_dataset()
        assert len(ds) == N_HUMANEVAL
        results = await env.generate(
            ds, client=vf_client(llm), model="stand-in", max_concurrent=8, on_progress=lambda *a: None
        )
    finally:
        await env.aclose_sandboxes()
    outs = outputs_of(results)
    assert len(outs) == N_HUMANEVAL
    for o in outs:
        pid = humaneval_subset[o["example_id"]].problem_id
        expected = 0.0 if pid in BROKEN else 1.0
        assert o["error"] is None, (pid, o["error"])
        assert o["reward"] == expected, (pid, o["metrics"])
        m = o["metrics"]
        assert m["pass_rate"] == expected and m["all_passed"] == expected
        assert m["python_calls"] == 1.0 and m["num_turns"] == 2.0
        assert m["sandbox_ready_wait_s"] >= 0.0 and m["sandbox_provision_s"] >= 0.0
    assert llm.requests == 2 * N_HUMANEVAL


async def test_rollout_without_tool_calls_scores_with_a_user_pool(make_pool, fake_llm, stdio_subset) -> None:
    pool = await make_pool(warm=2)
    llm = await fake_llm(code_agent_script(solver_for(stdio_subset), tool=None))
    ids = [p.problem_id for p in stdio_subset]
    env = load_environment(dataset="stdio", problem_ids=ids, sandboxes=pool, reward="all_passed")
    results = await env.generate(
        env.get_dataset(), client=vf_client(llm), model="stand-in", on_progress=lambda *a: None
    )
    for o in outputs_of(results):
        assert o["error"] is None and o["reward"] == 1.0, o
        assert o["metrics"]["total_tool_calls"] == 0.0
    assert pool.stats()[pool.default_template]["claimed"] == 0  # every lease released


async def test_rollouts_through_the_remote_client(server, fake_llm, humaneval_subset) -> None:
    probs = humaneval_subset[:3]
    llm = await fake_llm(code_agent_script(solver_for(probs, {probs[2].problem_id})))
    async with AsyncSandboxClient(server.address, KEY_A, timeout=60.0) as client:
        env = load_environment(num_examples=3, sandboxes=client)
        results = await env.generate(
            env.get_dataset(), client=vf_client(llm), model="stand-in", on_progress=lambda *a: None
        )
        assert [o["reward"] for o in sorted(outputs_of(results), key=lambda o: o["example_id"])] == [1.0, 1.0, 0.0]
        assert await client.list() == []  # the rollouts deleted their sandboxes


def _first_row(env: SandboxCodeEnv) -> dict[str, Any]:
    return dict(env.get_dataset()[0])


async def test_pool_exhausted_is_raised_not_scored(make_pool, fake_llm, humaneval_subset) -> None:
    pool = await make_pool(warm=0, max_size=1, claim_timeout=0.05)
    held = await pool.claim(timeout=60)  # the only sandbox the pool may have
    llm = await fake_llm(code_agent_script(solver_for(humaneval_subset)))
    env = load_environment(num_examples=1, sandboxes=pool)
    try:
        state = await env.rollout(_first_row(env), vf_client(llm), "stand-in", {})
        assert isinstance(state["error"], SandboxInfraError)
        assert isinstance(state["error"], vf.SandboxError) and isinstance(state["error"], vf.InfraError)
        assert state["error"].kind == "pool_exhausted"
        assert state["stop_condition"] == "has_error"
        with pytest.raises(SandboxInfraError):
            await env.rubric.score_rollout(state)
        assert state.get("reward") is None  # never scored
        with pytest.raises(SandboxInfraError):
            await env.run_rollout(_first_row(env), vf_client(llm), "stand-in", {})
    finally:
        await held.close()


class KillingProvider:
    """Hands out real sandboxes whose agent was just killed: the sandbox is lost mid-rollout."""

    cancel_safe = True

    def __init__(self, pool: Any) -> None:
        self.inner = PoolProvider(pool)

    async def acquire(self, **kwargs: Any) -> Any:
        sb = await self.inner.acquire(**kwargs)
        os.kill(sb.handle.backend_data.pid, signal.SIGKILL)
        return sb


@pytest.mark.parametrize("tool", ["python", None])
async def test_sandbox_lost_is_raised_not_scored(make_pool, fake_llm, humaneval_subset, tool) -> None:
    pool = await make_pool(warm=0)
    llm = await fake_llm(code_agent_script(solver_for(humaneval_subset), tool=tool))
    env = SandboxCodeEnv(dataset=load_environment(num_examples=1).dataset, sandboxes=KillingProvider(pool))
    state = await env.rollout(_first_row(env), vf_client(llm), "stand-in", {})
    # Lost at the tool call (tool="python") or at scoring (no tool call): an error either way.
    assert isinstance(state["error"], SandboxInfraError) and state["error"].kind == "sandbox_lost"
    assert state.get("sandbox_score") is None
    with pytest.raises(SandboxInfraError):
        await env.run_group([_first_row(env)], vf_client(llm), "stand-in", {})
    assert pool.stats()[pool.default_template]["claimed"] == 0


async def test_model_failure_is_a_zero_not_an_error(make_pool, fake_llm) -> None:
    pool = await make_pool(warm=1)
    llm = await fake_llm(lambda request, turn: "I cannot solve this.")
    env = load_environment(num_examples=1, sandboxes=pool)
    out = await env.run_rollout(_first_row(env), vf_client(llm), "stand-in", {})
    assert out["error"] is None and out["reward"] == 0.0
    assert out["metrics"]["pass_rate"] == 0.0


def test_hub_convention_loads_without_trainer_imports_in_the_core() -> None:
    import subprocess
    import sys

    code = (
        "import sys, sandboxes_rl; assert 'verifiers' not in sys.modules; "
        "import verifiers as vf; env = vf.load_environment('sandboxes-rl', num_examples=2); "
        "print(type(env).__name__, len(env.get_dataset()), sorted(t.name for t in env.tool_defs))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[-4:] == ["SandboxCodeEnv", "2", "['bash',", "'python']"]


def test_infra_error_type_is_the_librarys() -> None:
    err = SandboxInfraError(sandboxes.SandboxLost("gone"))
    assert isinstance(err, vf.SandboxError) and err.kind == "sandbox_lost"


class KillFirstProvider(KillingProvider):
    """Only the first sandbox handed out is lost; the next ones are fine."""

    def __init__(self, pool: Any) -> None:
        super().__init__(pool)
        self.handed = 0

    async def acquire(self, **kwargs: Any) -> Any:
        self.handed += 1
        if self.handed == 1:
            return await super().acquire(**kwargs)
        return await self.inner.acquire(**kwargs)


async def test_verifiers_retry_reschedules_a_rollout_that_lost_its_sandbox(make_pool, fake_llm, humaneval_subset) -> None:
    pool = await make_pool(warm=0)
    provider = KillFirstProvider(pool)
    llm = await fake_llm(code_agent_script(solver_for(humaneval_subset)))
    env = SandboxCodeEnv(dataset=load_environment(num_examples=1).dataset, sandboxes=provider)
    # verifiers' own retry (max_retries) catches the raised SandboxError and runs the rollout again.
    out = await env.run_rollout(_first_row(env), vf_client(llm), "stand-in", {}, max_retries=1)
    assert out["error"] is None and out["reward"] == 1.0
    assert provider.handed == 2
