"""The Daytona API through the unmodified `daytona` SDK (its client virtualenv, `make clients`)
against a `sandboxes` server, beside our own remote client (gRPC) on the same server in the same
run: the SDK's `process.exec("true")` (baseline: our client's exec of `bash -c true` in a
sandbox of the same template). The server is a `sandboxes serve` process with its defaults
(`bench/served.py`)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from bench.common import Report, Stats, client_python
from bench.e2b_api import native

ROOT = Path(__file__).resolve().parent.parent
CLIENT = client_python("daytona")
SCENARIOS = ROOT / "tests" / "clients" / "daytona_scenarios.py"
CALLS = 300


async def measure() -> tuple[dict, dict]:
    from bench.served import run_driver, served

    if not CLIENT.exists():
        raise SystemExit(f"{CLIENT} is missing: run `make clients`")
    async with served() as server:
        env = {"DAYTONA_API_URL": server.http_url + "/daytona", "DAYTONA_API_KEY": server.key}
        sdk = await run_driver([str(CLIENT), str(SCENARIOS), "bench", str(CALLS)], env)
        ours = await native(server.address, server.key)
    return sdk, ours


def run() -> Report:
    rep = Report("daytona_api")
    sdk, ours = asyncio.run(measure())
    exec_sdk = rep.add(Stats.of('SDK process.exec("true")', sdk["exec_true"]))
    exec_ours = rep.add(Stats.of("our client exec bash -c true (baseline)", ours["exec_true"]))
    rep.ratios["SDK process.exec / our exec (median)"] = exec_sdk.median_ms / exec_ours.median_ms
    rep.headline(
        'Daytona SDK process.exec("true") (vs our client\'s exec)',
        exec_sdk,
        exec_ours,
        "SDK process.exec / our exec (median)",
    )
    return rep


if __name__ == "__main__":
    r = run()
    r.print()
    print(f"saved {r.save()}")
