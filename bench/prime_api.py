"""The Prime Sandboxes API through the unmodified SDK (its client virtualenv, `make clients`) against
a `sandboxes` server, beside our own remote client (gRPC) on the same server in the same run:
create + ready, a command (`true`), and a background job's round trip (start, poll to done;
its baseline is the same program run in the foreground by our client). The server is a
`sandboxes serve` process with its defaults (`bench/served.py`: a warm pool of 4 per template, the
agent template for the SDK's image)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from bench.common import Report, Stats, client_python

ROOT = Path(__file__).resolve().parent.parent
CLIENT = client_python("prime-current")
CREATES, EXECS, JOBS = 50, 300, 50


async def native(address: str, key: str) -> dict[str, list[float]]:
    from sandboxes.client import AsyncSandboxClient

    out: dict[str, list[float]] = {"create": [], "exec_true": []}
    async with AsyncSandboxClient(address, api_key=key) as c:
        for _ in range(CREATES):
            t = time.perf_counter()
            sb = await c.create(template="agent")
            out["create"].append(time.perf_counter() - t)
            await c.delete(sb.id)
        async with c.sandbox(template="agent") as sb:
            for _ in range(EXECS):
                t = time.perf_counter()
                await sb.exec(["/bin/bash", "-c", "true"])
                out["exec_true"].append(time.perf_counter() - t)
    return out


async def measure() -> tuple[dict, dict]:
    from bench.served import served

    if not CLIENT.exists():
        raise SystemExit(f"{CLIENT} is missing: run `make clients`")
    async with served() as server:
        with tempfile.TemporaryDirectory() as home:
            env = {
                "PATH": os.environ["PATH"],
                "HOME": home,
                "PRIME_API_KEY": server.key,
                "PRIME_API_BASE_URL": server.http_url,
            }
            proc = await asyncio.create_subprocess_exec(
                str(CLIENT),
                str(Path(__file__).with_name("prime_driver.py")),
                str(CREATES),
                str(EXECS),
                str(JOBS),
                env=env,
                stdout=asyncio.subprocess.PIPE,
            )
            out, _ = await proc.communicate()
            if proc.returncode:
                raise SystemExit(f"the SDK driver failed ({proc.returncode})")
        sdk = json.loads(out)
        ours = await native(server.address, server.key)
    return sdk, ours


def run() -> Report:
    rep = Report("prime_api")
    sdk, ours = asyncio.run(measure())
    create = rep.add(Stats.of("SDK create + wait_for_creation", sdk["create_wait"]))
    create0 = rep.add(Stats.of("our client create (baseline)", ours["create"]))
    ex = rep.add(Stats.of("SDK execute_command('true')", sdk["exec_true"]))
    ex0 = rep.add(Stats.of("our client exec bash -c true (baseline)", ours["exec_true"]))
    job = rep.add(Stats.of("SDK background job round trip", sdk["job_round_trip"]))
    rep.ratios["SDK create+wait / ours (median)"] = create.median_ms / create0.median_ms
    rep.ratios["SDK execute_command / ours (median)"] = ex.median_ms / ex0.median_ms
    rep.ratios["SDK background job / our exec (median)"] = job.median_ms / ex0.median_ms
    rep.headline(
        "Prime SDK create + wait_for_creation (vs our client's create)",
        create,
        create0,
        "SDK create+wait / ours (median)",
    )
    rep.headline(
        "Prime SDK execute_command('true') (vs our client's exec)",
        ex,
        ex0,
        "SDK execute_command / ours (median)",
    )
    rep.headline(
        "Prime SDK background job round trip (vs our client's exec)",
        job,
        ex0,
        "SDK background job / our exec (median)",
    )
    rep.extra["python"] = sys.version.split()[0]
    return rep
