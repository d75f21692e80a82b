"""64 concurrent verifiers 0.4 rollouts of the `sandboxes-code` taskset (HumanEval, a scripted model
answering each problem's canonical solution after a 1 s first turn), each rollout's runtime a
`PrimeRuntime` on a `sandboxes` server (the real SDK over the Prime API), judged with `run_tests`
on the server's gRPC API. Baseline in the same run: the same rollouts on v1's `subprocess` runtime
(no sandbox for the model's turn), so the difference is what provisioning a sandbox per rollout
costs a user of v1 here. The server is a `sandboxes serve` process with its defaults
(`bench/served.py`: a warm pool of 4 per template)."""

from __future__ import annotations

import asyncio
import os
import socket
import statistics
import tempfile
import time

from bench.common import Report, Stats

ROLLOUTS = 64
TTFT_S = 1.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def rollouts(runtime: dict) -> tuple[float, list]:
    from sandboxes_rl.fake_llm import FakeChatServer, fenced
    from sandboxes_rl.problems import problem_rows
    from verifiers.v1.cli.eval.runner import run_eval
    from verifiers.v1.configs.cli.eval import EvalConfig

    answers = {r["question"]: r["answer"] for r in problem_rows("humaneval", num_examples=ROLLOUTS)}

    def reply(request: dict, turn: int) -> str:
        prompt = next(m["content"] for m in request["messages"] if m["role"] == "user")
        return fenced(answers[prompt])

    port = _free_port()
    async with FakeChatServer(reply, ttft_s=TTFT_S) as llm:
        env: dict = {
            "taskset": {"id": "sandboxes-code", "problems": "humaneval", "num_examples": ROLLOUTS},
            "agent": {"runtime": runtime},
        }
        if runtime["type"] == "prime":
            env["interception"] = {
                "type": "server",
                "tunnel": {"type": "custom", "url": f"http://127.0.0.1:{port}", "port": port},
            }
        config = EvalConfig.model_validate(
            {
                "env": env,
                "model": "scripted",
                "client": {"type": "eval", "base_url": llm.url, "api_key_var": "FAKE_API_KEY"},
                "num_rollouts": 1,
                "max_concurrent": ROLLOUTS,
                "push": False,
                "rich": None,
                "output_dir": tempfile.mkdtemp(prefix="bench-vf-"),
            }
        )
        t = time.perf_counter()
        episodes = await run_eval(config)
        wall = time.perf_counter() - t
    return wall, [tr for ep in episodes for tr in ep.traces]


async def measure() -> dict:
    from sandboxes_code.taskset import use_runtime
    from sandboxes_rl.runtime import SandboxRuntime

    from bench.served import served

    out: dict = {}
    with tempfile.TemporaryDirectory() as home:
        async with served() as server:
            os.environ.update(
                {
                    "HOME": home,
                    "FAKE_API_KEY": "unused",
                    "VF_RUN_ID": "bench",
                    "PRIME_API_KEY": server.key,
                    "PRIME_API_BASE_URL": server.http_url,
                }
            )
            judge = SandboxRuntime(address=server.address, api_key=server.key)
            use_runtime(judge)
            try:
                for name, runtime in (
                    ("subprocess", {"type": "subprocess"}),
                    ("prime", {"type": "prime", "image": "python:3.11-slim"}),
                ):
                    out[name] = await rollouts(runtime)
            finally:
                use_runtime(None)
                await asyncio.to_thread(judge.close)
    return out


def run() -> Report:
    rep = Report("verifiers_v1")
    got = asyncio.run(measure())
    (base_wall, base_traces), (wall, traces) = got["subprocess"], got["prime"]
    boots = [t.metrics["sandbox_ready_wait_s"] for t in traces if "sandbox_ready_wait_s" in t.metrics]
    boot = rep.add(Stats.of("PrimeRuntime boot per rollout (create + wait + mkdir)", boots))
    for name, ts in (("prime", traces), ("subprocess", base_traces)):
        ok = [t for t in ts if t.ok]
        rep.extra[f"{name}: rollouts ok / scored 1.0"] = (
            f"{len(ok)} / {sum(t.reward == 1.0 for t in ok)} of {ROLLOUTS}"
        )
    rep.extra["64 rollouts, PrimeRuntime, wall s"] = round(wall, 2)
    rep.extra["64 rollouts, subprocess runtime (baseline), wall s"] = round(base_wall, 2)
    rep.extra["boot median s"] = round(statistics.median(boots), 4) if boots else None
    rep.ratios["64 rollouts wall: PrimeRuntime / subprocess"] = wall / base_wall
    rep.headline(
        f"{ROLLOUTS} concurrent verifiers v1 rollouts (1 s model turn), PrimeRuntime on our server",
        f"{wall:.2f} s wall; boot {_ms(boot.median_ms)} median",
        f"{base_wall:.2f} s (subprocess runtime)",
        "64 rollouts wall: PrimeRuntime / subprocess",
    )
    return rep


def _ms(v: float) -> str:
    return f"{v:.3g} ms" if v < 100 else f"{v:.0f} ms"
