"""Overlap benchmark: provisioning hidden behind the first inference turn.

64 concurrent rollouts of a small code agent against the fake LLM stand-in
(`sandboxes_rl.fake_llm.FakeChatServer`, real HTTP): turn 1 (time to first token T) answers with a
`python` tool call, the tool runs in the rollout's sandbox, turn 2 answers with the program, which is
judged with `run_tests`. The pool starts cold (warm=0): every rollout needs a sandbox created for it,
64 at once, so provisioning is real and queues on the backend. T is set longer than the slowest
provisioning of a calibration burst (which also warms the image and the interpreter's files), and
spread over the batch as real inference latencies are: rollout i gets T * (1 + 0.5 * i / 63), the
same in both runs.

Two ways, same rollouts, each on a fresh cold pool:
- overlapped: the rollout starts claiming at once (`SandboxLease.start()`, a task) and waits only at
  its first tool call;
- sandbox first: the rollout awaits its sandbox before its first inference turn.

Reported: % of provisioning hidden (1 - mean sandbox_ready_wait_s / mean provisioning time; target
>= 95 %), and the total wall time of the 64 rollouts both ways. Run for the local backend, and for the
docker backend when `sandboxes.backends.docker` exists and its image is built (skipped with a
message otherwise).

    python -m bench overlap
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import statistics
import subprocess
import time
from typing import Any

from bench.common import Report, Stats

ROLLOUTS = 64
TURN2_S = 0.2  # time to first token of the second turn
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "python",
            "description": "Run a Python program in the sandbox.",
            "parameters": {
                "type": "object",
                "properties": {"code": {"type": "string"}},
                "required": ["code"],
            },
        },
    }
]


async def _calibrate(backend: str, n: int) -> float:
    """Slowest provisioning of a burst of `n` claims on a cold pool (seconds)."""
    import sandboxes

    async with sandboxes.Pool(backend=backend, warm=0, claim_timeout=600) as pool:
        t0 = time.perf_counter()

        async def one() -> tuple[float, Any]:
            sb = await pool.claim()
            return time.perf_counter() - t0, sb

        got = await asyncio.gather(*(one() for _ in range(n)))
        slowest = max(d for d, _ in got)
        await asyncio.gather(*(sb.exec(["python3", "-c", "pass"]) for _, sb in got))
        await asyncio.gather(*(sb.close() for _, sb in got))
    return slowest


async def _rollout(
    pool: Any, url: str, session: Any, problem: Any, question: str, overlap: bool
) -> dict[str, Any]:
    from sandboxes_rl.fake_llm import chat
    from sandboxes_rl.overlap import SandboxLease
    from sandboxes_rl.scoring import extract_code, judge

    t0 = time.perf_counter()
    lease = SandboxLease(pool).start()
    if not overlap:
        await lease.get()  # the baseline: wait for the sandbox before the first inference turn
    try:
        messages: list[dict[str, Any]] = [{"role": "user", "content": question}]
        msg = await chat(url, messages, tools=TOOLS, session=session)  # turn 1
        call = msg["tool_calls"][0]
        code = json.loads(call["function"]["arguments"])["code"]
        sb = await lease.get()  # first tool call: the only place the overlapped rollout waits
        r = await sb.exec(["python3", "-c", code], timeout=10)
        messages += [msg, {"role": "tool", "tool_call_id": call["id"], "content": r.stdout.decode()}]
        msg = await chat(url, messages, tools=TOOLS, session=session)  # turn 2
        score = await judge(sb, extract_code(msg["content"], "python"), problem.tests, time_limit=10)
    finally:
        await lease.release()
    return {
        "wall_s": time.perf_counter() - t0,
        "ready_wait_s": lease.ready_wait_s,
        "provision_s": lease.provision_s,
        "reward": score.reward,
    }


async def _run_mode(backend: str, problems: list[Any], ttft_s: float, overlap: bool) -> dict[str, Any]:
    import aiohttp
    from sandboxes_rl.fake_llm import FakeChatServer, code_agent_script
    from sandboxes_rl.problems import question_of

    import sandboxes

    questions = [question_of(p) for p in problems]
    table = {q: p.reference() for q, p in zip(questions, problems)}
    spread = {q: ttft_s * (1 + 0.5 * i / max(1, len(questions) - 1)) for i, q in enumerate(questions)}

    def ttft(request: dict[str, Any], turn: int) -> float:
        if turn:
            return TURN2_S
        return spread[request["messages"][0]["content"]]

    llm = FakeChatServer(code_agent_script(table.get), ttft_s=ttft)
    async with (
        llm,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session,
        sandboxes.Pool(backend=backend, warm=0, claim_timeout=600) as pool,
    ):
        t0 = time.perf_counter()
        results = await asyncio.gather(
            *(_rollout(pool, llm.url, session, p, q, overlap) for p, q in zip(problems, questions))
        )
        wall = time.perf_counter() - t0
    return {"wall_s": wall, "rollouts": results}


def _docker_ready() -> str | None:
    """None when the docker backend can run here, else why not."""
    if importlib.util.find_spec("sandboxes.backends.docker") is None:
        return "sandboxes.backends.docker does not exist"
    try:
        from sandboxes.backends.docker import DEFAULT_IMAGE
    except Exception as e:  # noqa: BLE001
        return f"the docker backend does not import: {e}"
    try:
        r = subprocess.run(
            ["docker", "image", "inspect", DEFAULT_IMAGE], capture_output=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"no docker CLI / engine: {e}"
    if r.returncode != 0:
        return f"image {DEFAULT_IMAGE} is not built (make images)"
    return None


def _bench_backend(rep: Report, backend: str, problems: list[Any]) -> None:
    slowest = asyncio.run(_calibrate(backend, len(problems)))
    ttft = round(max(1.0, 1.5 * slowest + 0.25), 2)
    over = asyncio.run(_run_mode(backend, problems, ttft, overlap=True))
    first = asyncio.run(_run_mode(backend, problems, ttft, overlap=False))
    prov = [r["provision_s"] for r in over["rollouts"]]
    waits = [r["ready_wait_s"] for r in over["rollouts"]]
    base_waits = [r["ready_wait_s"] for r in first["rollouts"]]
    base_prov = [r["provision_s"] for r in first["rollouts"]]
    hidden = max(0.0, 1.0 - statistics.fmean(waits) / statistics.fmean(prov))
    hidden_first = max(0.0, 1.0 - statistics.fmean(base_waits) / statistics.fmean(base_prov))
    rep.add(Stats.of(f"{backend}: provisioning (overlapped run)", prov))
    rep.add(Stats.of(f"{backend}: sandbox_ready_wait_s, overlapped", waits))
    rep.add(Stats.of(f"{backend}: sandbox_ready_wait_s, sandbox first", base_waits))
    rep.add(Stats.of(f"{backend}: rollout wall, overlapped", [r["wall_s"] for r in over["rollouts"]]))
    rep.add(Stats.of(f"{backend}: rollout wall, sandbox first", [r["wall_s"] for r in first["rollouts"]]))
    rep.ratios[f"{backend}: provisioning hidden % (target >= 95)"] = 100.0 * hidden
    rep.ratios[f"{backend}: provisioning hidden %, sandbox first"] = 100.0 * hidden_first
    rep.ratios[f"{backend}: total wall overlapped / sandbox first"] = over["wall_s"] / first["wall_s"]
    rep.headline(
        f"RL overlap, {backend}: provisioning hidden behind the first turn (target 95 %)",
        f"{100.0 * hidden:.0f} % hidden",
        f"sandbox awaited first: {100.0 * hidden_first:.0f} % hidden",
        f"{backend}: total wall overlapped / sandbox first",
    )
    rep.extra[f"{backend}: first-turn time to first token (s)"] = f"{ttft} .. {round(1.5 * ttft, 2)}"
    rep.extra[f"{backend}: calibration burst, slowest provisioning (s)"] = round(slowest, 3)
    rep.extra[f"{backend}: total wall of {len(problems)} rollouts, overlapped (s)"] = round(over["wall_s"], 3)
    rep.extra[f"{backend}: total wall of {len(problems)} rollouts, sandbox first (s)"] = round(
        first["wall_s"], 3
    )
    rewards = [r["reward"] for r in over["rollouts"] + first["rollouts"]]
    rep.extra[f"{backend}: mean reward (canonical solutions: 1.0)"] = statistics.fmean(rewards)


def run() -> Report:
    from sandboxes.datasets import load_humaneval

    rep = Report("overlap")
    problems = load_humaneval()[:ROLLOUTS]
    rep.extra["rollouts"] = len(problems)
    _bench_backend(rep, "local", problems)
    why = _docker_ready()
    if why is None:
        _bench_backend(rep, "docker", problems)
    else:
        msg = f"skipped: {why}"
        print(f"overlap, docker backend {msg}")
        rep.extra["docker"] = msg
    return rep
