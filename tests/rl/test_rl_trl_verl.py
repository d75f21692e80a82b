"""TRL's async reward function and tool environment, veRL's compute_score: 1.0 for HumanEval's
canonical solutions, 0.0 for the broken ones; infrastructure failures raised, never scored 0."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from typing import Any

import pytest
from rl_helpers import N_HUMANEVAL
from sandboxes_rl.fake_llm import fenced
from sandboxes_rl.problems import tests_spec
from sandboxes_rl.runtime import SandboxRuntime
from sandboxes_rl.trl import SandboxCodeEnv, make_code_reward
from sandboxes_rl.verl import compute_score, compute_score_batch

import sandboxes


def humaneval_columns(problems: list[Any]) -> dict[str, list[Any]]:
    return {
        "test": [p.tests and _test_of(p) for p in problems],
        "entry_point": [p.entry_point for p in problems],
    }


def _test_of(p: Any) -> str:
    # The dataset's own `test` column: the check function, without the call the loader appended.
    check = p.tests[0].check
    return check[: check.rindex("check(")]


async def test_trl_reward_humaneval_canonical_and_broken(runtime, humaneval_subset) -> None:
    reward = make_code_reward(runtime)
    assert reward.__name__ == "code_reward" and asyncio.iscoroutinefunction(reward)
    n = len(humaneval_subset)
    prompts = [p.prompt for p in humaneval_subset]
    good = [[{"role": "assistant", "content": "Sure:\n" + fenced(p.reference())}] for p in humaneval_subset]
    bad = [fenced(p.broken()) for p in humaneval_subset]  # standard (non-conversational) completions
    cols = humaneval_columns(humaneval_subset)
    assert await reward(prompts, good, **cols) == [1.0] * n
    assert await reward(prompts, bad, **cols) == [0.0] * n
    assert n == N_HUMANEVAL


async def test_trl_reward_stdio_and_samples_without_tests(runtime, stdio_subset) -> None:
    reward = make_code_reward(runtime, reward="all_passed")
    infos = [{"language": "python", "test_cases": tests_spec(p.tests)} for p in stdio_subset]
    completions = [fenced(p.reference()) for p in stdio_subset] + ["```python\nprint('?')\n```"]
    out = await reward(
        ["q"] * len(completions), completions, verification_info=[*map(json.dumps, infos), None]
    )
    assert out == [1.0] * len(stdio_subset) + [None]
    with pytest.raises(sandboxes.InvalidRequest):
        await reward(["q"], ["x"], unrelated=[1])


def test_verl_compute_score_humaneval(runtime, humaneval_subset) -> None:
    for p in humaneval_subset:
        truth = json.dumps({"test": _test_of(p), "entry_point": p.entry_point})
        good = compute_score(
            "openai_humaneval", "```python\n" + p.reference() + "```", truth, runtime=runtime
        )
        bad = compute_score("openai_humaneval", fenced(p.broken()), truth, runtime=runtime)
        assert (good, bad) == (1.0, 0.0), p.problem_id


def test_verl_batch_and_extra_info(runtime, humaneval_subset, stdio_subset) -> None:
    probs = humaneval_subset[:6]
    truths = [{"test": _test_of(p), "entry_point": p.entry_point} for p in probs]
    sols = [fenced(p.reference() if i % 2 == 0 else p.broken()) for i, p in enumerate(probs)]
    assert compute_score_batch(["he"] * 6, sols, truths, runtime=runtime) == [1.0, 0.0] * 3
    p = stdio_subset[0]
    info = {"tests": tests_spec(p.tests), "language": "python"}
    detail = compute_score("stdio", p.reference(), None, extra_info=info, runtime=runtime, return_dict=True)
    assert detail["score"] == 1.0 and detail["verdict"] == "accepted"
    apps = {"inputs": ["1 2\n", "5 7\n"], "outputs": ["3\n", "12\n"]}
    assert (
        compute_score("apps", "print(sum(map(int, input().split())))", json.dumps(apps), runtime=runtime)
        == 1.0
    )
    with pytest.raises(sandboxes.InvalidRequest):
        compute_score("x", "print(1)", None, runtime=runtime)


def test_verl_infrastructure_failure_is_raised(native) -> None:
    rt = SandboxRuntime(backend="local", warm=0, pool_kwargs={"max_size": 1, "claim_timeout": 0.05})
    try:
        held = rt.call(lambda: _claim_held(rt))
        with pytest.raises(sandboxes.PoolExhausted):
            compute_score("x", "print(1)", {"inputs": [""], "outputs": ["1\n"]}, runtime=rt, retries=0)
        rt.call(held.close)
    finally:
        rt.close()


async def _claim_held(rt: SandboxRuntime) -> Any:
    await rt.provider()
    return await rt.source.claim(timeout=60)


async def test_trl_environment_provisions_at_reset(runtime) -> None:
    env = SandboxCodeEnv(runtime)
    assert env.reset(prompt="p") is None  # returns at once; provisioning runs on the runtime
    assert await env.python("print(6 * 7)") == "42\n"
    assert env.sandbox_ready_wait_s is not None and env.sandbox_ready_wait_s >= 0.0
    out = await env.bash("echo err >&2; exit 4")
    assert "stderr:\nerr" in out and "[exit code 4]" in out
    env.reset()  # next rollout: a new sandbox; the previous one is released in the background
    assert "ok" in await env.python("import os; print('ok')")
    # TRL exposes every public method but reset / get_reward as a tool.
    import inspect

    public = [n for n, _ in inspect.getmembers(SandboxCodeEnv, inspect.isfunction) if not n.startswith("_")]
    assert sorted(public) == ["bash", "python", "reset"]
    env._release()


async def test_trl_lost_sandbox_in_a_tool_is_raised_by_the_reward(runtime, humaneval_subset) -> None:
    env = SandboxCodeEnv(runtime)
    env.reset()
    assert await env.python("print(1)") == "1\n"
    lease = env._pending.result()
    os.kill(lease.sandbox.handle.backend_data.pid, signal.SIGKILL)
    with pytest.raises(sandboxes.SandboxLost):
        await env.python("print(2)")  # TRL would hand this error to the model...
    assert isinstance(env.infra_error, sandboxes.SandboxLost)
    p = humaneval_subset[0]
    reward = make_code_reward(runtime)
    with pytest.raises(sandboxes.SandboxLost):  # ...and the reward refuses to score the rollout
        await reward([p.prompt], [fenced(p.reference())], environments=[env], **humaneval_columns([p]))
    env._release()


async def test_trl_reward_prefix_column_brings_the_prompts_imports(runtime, humaneval_rows) -> None:
    from sandboxes_rl.problems import problem_rows

    rows = problem_rows("humaneval", num_examples=3)
    bodies = [r["answer"].replace(r["info"]["prefix"], "", 1) for r in rows]  # the function alone
    assert all("from typing" not in b for b in bodies[:1])
    reward = make_code_reward(runtime)
    tests = [r["info"]["tests"] for r in rows]
    without = await reward(["q"] * 3, [fenced(b) for b in bodies], tests=tests)
    with_prefix = await reward(
        ["q"] * 3, [fenced(b) for b in bodies], tests=tests, prefix=[r["info"]["prefix"] for r in rows]
    )
    assert with_prefix == [1.0, 1.0, 1.0] and without[0] == 0.0


def test_a_rollout_grades_through_a_fork_of_the_hosts_template(runtime) -> None:
    """The runtime's pool takes the `Pool`'s defaults: a leased sandbox starts no zygote, and its
    first grading, one rollout's only one, is made from the host's template interpreter (a root
    manager's local sandboxes), a fork rather than an interpreter's start. An explicit
    `python_zygote` in `pool_kwargs` wins."""

    async def first_grading() -> tuple[str, str]:
        lease = await runtime.lease()
        try:
            sb = await lease.get()
            report = await sb.run_tests(
                "def f():\n    return 1\n", [sandboxes.TestCase(check="assert f() == 1")]
            )
            assert report.all_passed
            mode = runtime.source.templates[runtime.source.default_template].python_zygote
            return report.cases[0].path, mode
        finally:
            await lease.release()

    assert runtime.call(first_grading, timeout=120) == ("zygote", "lazy")
    eager = SandboxRuntime(
        backend="local", warm=1, pool_kwargs={"python_zygote": "eager", "claim_timeout": 60.0}
    )
    try:

        async def template() -> str:
            await eager.provider()
            return eager.source.templates[eager.source.default_template].python_zygote

        assert eager.call(template, timeout=120) == "eager"
    finally:
        eager.close()


def test_verl_batch_infrastructure_failure_is_raised(native) -> None:
    rt = SandboxRuntime(backend="local", warm=0, pool_kwargs={"max_size": 1, "claim_timeout": 0.05})
    try:
        held = rt.call(lambda: _claim_held(rt))
        with pytest.raises(sandboxes.PoolExhausted):
            compute_score_batch(
                ["x"], ["print(1)"], [{"inputs": [""], "outputs": ["1\n"]}], runtime=rt, retries=0
            )
        rt.call(held.close)
    finally:
        rt.close()


SLOW = "import time\ntime.sleep(0.05)\nprint(int(input()) + 1)\n"


async def _score_while_killing(pool: sandboxes.Pool, n: int, retries: int) -> list[float]:
    """`score_batch` of `n` slow programs; the agent of a sandbox it graded in is killed once it
    has started."""
    from sandboxes_rl.rewards import score_batch

    jobs = [(SLOW, [sandboxes.TestCase(str(i), str(i + 1))], "python") for i in range(n)]
    scoring = asyncio.ensure_future(score_batch(pool, jobs, retries=retries))
    tp = pool._tps[pool.default_template]
    for _ in range(400):
        if tp.claimed:
            break
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.3)
    os.kill(next(iter(tp.claimed.values())).handle.backend_data.pid, signal.SIGKILL)
    return [s.reward for s in await scoring]


async def test_a_batch_reward_survives_a_lost_sandbox(make_pool) -> None:
    """A sandbox lost under the batch: its programs are graded again on a fresh one, and every
    reward is the program's own."""
    pool = await make_pool(warm=2)
    assert await _score_while_killing(pool, 48, retries=1) == [1.0] * 48


async def test_a_batch_reward_never_scores_an_infrastructure_failure(make_pool) -> None:
    """Without retries the lost sandbox's programs have no verdict: the batch raises, no 0."""
    pool = await make_pool(warm=2)
    with pytest.raises(sandboxes.SandboxError):
        await _score_while_killing(pool, 48, retries=0)


def test_a_batch_reward_claims_only_the_sandboxes_that_keep_the_cores_busy(runtime) -> None:
    """TRL's reward on an embedded pool (through the runtime's provider) grades its batch in as
    many sandboxes as keep this machine's CPUs busy, however large the batch."""
    from sandboxes.grading import host_lanes

    reward = make_code_reward(runtime)
    n = 64
    prompts = [""] * n
    completions = [fenced(f"print(int(input()) + {i})") for i in range(n)]
    tests = [json.dumps({"inputs": ["1\n"], "outputs": [f"{i + 1}\n"]}) for i in range(n)]

    async def claims() -> int:
        await runtime.provider()
        pool = runtime.source
        return pool._tps[pool.default_template].claims_total

    before = runtime.call(claims)
    assert runtime.call(lambda: reward(prompts, completions, input_output=tests)) == [1.0] * n
    pool = runtime.source
    assert 1 <= runtime.call(claims) - before <= host_lanes(pool.templates[pool.default_template])
