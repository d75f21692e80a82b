"""The E2B API through the unmodified SDKs (their client virtualenv, `make clients`) against a
`sandboxes` server, beside our own remote client (gRPC) on the same server in the same run:
`commands.run("true")` (baseline: our client's exec of `bash -c true`) and the code interpreter's
`run_code("1+1")` (baseline: our client's exec of a fresh `python3 -c "print(1+1)"`, what a
caller without a kernel pays). The server is a `sandboxes serve` process with its defaults
(`bench/served.py`)."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

from bench.common import Report, Stats, client_python

ROOT = Path(__file__).resolve().parent.parent
CLIENT = client_python("e2b")
SCENARIOS = ROOT / "tests" / "clients" / "e2b_scenarios.py"
CALLS = 300


async def native(address: str, key: str) -> dict[str, list[float]]:
    from sandboxes.client import AsyncSandboxClient

    out: dict[str, list[float]] = {"exec_true": [], "python": []}
    async with AsyncSandboxClient(address, api_key=key) as c, c.sandbox(template="agent") as sb:
        for argv, name in (
            (["/bin/bash", "-c", "true"], "exec_true"),
            (["python3", "-c", "print(1+1)"], "python"),
        ):
            for _ in range(10):
                await sb.exec(argv)
            for _ in range(CALLS):
                t = time.perf_counter()
                await sb.exec(argv)
                out[name].append(time.perf_counter() - t)
    return out


async def measure() -> tuple[dict, dict]:
    from bench.served import run_driver, served

    if not CLIENT.exists():
        raise SystemExit(f"{CLIENT} is missing: run `make clients`")
    async with served() as server:
        env = {"E2B_API_URL": server.http_url, "E2B_SANDBOX_URL": server.http_url, "E2B_API_KEY": server.key}
        sdk = await run_driver([str(CLIENT), str(SCENARIOS), "bench", str(CALLS)], env)
        ours = await native(server.address, server.key)
    return sdk, ours


def run() -> Report:
    rep = Report("e2b_api")
    sdk, ours = asyncio.run(measure())
    run_true = rep.add(Stats.of('SDK commands.run("true")', sdk["commands_run"]))
    exec_true = rep.add(Stats.of("our client exec bash -c true (baseline)", ours["exec_true"]))
    cell = rep.add(Stats.of('code interpreter run_code("1+1")', sdk["run_code"]))
    fresh = rep.add(Stats.of("our client exec python3 -c (baseline)", ours["python"]))
    rep.ratios["SDK commands.run / our exec (median)"] = run_true.median_ms / exec_true.median_ms
    rep.ratios["run_code / fresh python3 (median)"] = cell.median_ms / fresh.median_ms
    rep.headline(
        'E2B SDK commands.run("true") (vs our client\'s exec)',
        run_true,
        exec_true,
        "SDK commands.run / our exec (median)",
    )
    rep.headline(
        'E2B code interpreter run_code("1+1") (vs our client running a fresh python3)',
        cell,
        fresh,
        "run_code / fresh python3 (median)",
    )
    rep.extra["python"] = sys.version.split()[0]
    return rep
