"""Density: memory per idle warm sandbox, with 1,000 of them on this machine."""

from __future__ import annotations

import asyncio
import time

from bench.common import Report, Stats
from bench.pool_bench import wait_warm


def mem_available() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no MemAvailable in /proc/meminfo")


async def fill(n: int) -> dict:
    import sandboxes

    before = mem_available()
    t = time.perf_counter()
    async with sandboxes.Pool(backend="local", warm=n, create_concurrency=16) as pool:
        await wait_warm(pool, n)
        fill_s = time.perf_counter() - t
        # Let page cache and lazily freed memory settle before reading.
        await asyncio.sleep(2)
        after = mem_available()
        # Prove they are alive: one Info round trip to a sample of them.
        sample = [await pool.claim() for _ in range(10)]
        t0 = time.perf_counter()
        infos = await asyncio.gather(*(sb.info() for sb in sample))
        info_s = time.perf_counter() - t0
        for sb in sample:
            await pool.release(sb)
    return {
        "sandboxes": n,
        "fill_s": fill_s,
        "memory_used_bytes": before - after,
        "memory_per_sandbox_mb": (before - after) / n / 2**20,
        "sample_info_s": info_s,
        "agent_version": infos[0].version,
    }


def run(n: int = 1000) -> Report:
    rep = Report("density")
    res = asyncio.run(fill(n))
    rep.extra.update(res)
    rep.add(Stats.of(f"fill {n} warm sandboxes (s as ms)", [res["fill_s"]]))
    rep.headline(
        f"density: {n:,} idle warm sandboxes (target 5 MB each)",
        f"{res['memory_per_sandbox_mb']:.2f} MB each, filled in {res['fill_s']:.1f} s",
    )
    return rep
