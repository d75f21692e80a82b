"""Timings of the unmodified `prime-sandboxes` SDK against a server (run by `bench/prime_api.py` in
the SDK's client virtualenv, with PRIME_API_BASE_URL / PRIME_API_KEY set): prints one JSON object
of sample lists in seconds."""

from __future__ import annotations

import asyncio
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


if __name__ == "__main__":
    n = [int(a) for a in sys.argv[1:4]]
    print(json.dumps(asyncio.run(main(*n))))
