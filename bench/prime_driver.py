"""Timings of the unmodified `prime-sandboxes` SDK against a server (run by `bench/prime_api.py` and
`bench/first_command.py` in the SDK's client virtualenv, with PRIME_API_BASE_URL / PRIME_API_KEY
set): prints one JSON object of sample lists in seconds.

    python prime_driver.py CREATES EXECS JOBS
    python prime_driver.py first_commands SEQUENTIAL,BURST,...
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time

from prime_sandboxes import AsyncSandboxClient, CreateSandboxRequest


async def main(creates: int, execs: int, jobs: int) -> dict[str, list[float]]:
    c = AsyncSandboxClient()
    out: dict[str, list[float]] = {"create_wait": [], "exec_true": [], "job_round_trip": []}
    for _ in range(creates):
        t = time.perf_counter()
        sb = await c.create(CreateSandboxRequest(name="bench", docker_image="python:3.11-slim"))
        await c.wait_for_creation(sb.id)
        out["create_wait"].append(time.perf_counter() - t)
        await c.delete(sb.id)
    sb = await c.create(CreateSandboxRequest(name="bench", docker_image="python:3.11-slim"))
    await c.wait_for_creation(sb.id)
    for _ in range(execs):
        t = time.perf_counter()
        await c.execute_command(sb.id, "true")
        out["exec_true"].append(time.perf_counter() - t)
    for _ in range(jobs):
        t = time.perf_counter()
        job = await c.start_background_job(sb.id, "true")
        while not (await c.get_background_job(sb.id, job)).completed:
            await asyncio.sleep(0.01)
        out["job_round_trip"].append(time.perf_counter() - t)
    await c.delete(sb.id)
    await c.aclose()
    return out


async def first_commands(shape: str) -> dict[str, list[float]]:
    """Seconds from `create` to `execute_command("true")` done (`wait_for_creation` between, as
        the SDK's users do), one at a time, then in each burst; each sandbox deleted after. A failed
    one (the SDK gave up or the command failed) is NaN, its error on stderr."""
    sequential, *bursts = (int(n) for n in shape.split(","))
    c = AsyncSandboxClient()

    async def one() -> float:
        t = time.perf_counter()
        sb = None
        try:
            sb = await c.create(CreateSandboxRequest(name="bench", docker_image="python:3.11-slim"))
            await c.wait_for_creation(sb.id)
            r = await c.execute_command(sb.id, "true")
            d = time.perf_counter() - t
            assert r.exit_code == 0, r
        except Exception as e:  # noqa: BLE001 - counted by the benchmark (NaN), not fatal
            print(f"first command failed: {type(e).__name__}: {e}", file=sys.stderr)
            d = float("nan")
        if sb is not None:
            with contextlib.suppress(Exception):
                await c.delete(sb.id)
        return d

    out = {"sequential": [await one() for _ in range(sequential)]}
    for n in bursts:
        await asyncio.sleep(2.0)
        out[str(n)] = list(await asyncio.gather(*(one() for _ in range(n))))
    await c.aclose()
    return out


if __name__ == "__main__":
    if sys.argv[1] == "first_commands":
        print(json.dumps(asyncio.run(first_commands(sys.argv[2]))))
    else:
        n = [int(a) for a in sys.argv[1:4]]
        print(json.dumps(asyncio.run(main(*n))))
