"""Burst: 10,000 execs with 1,000 in flight over 100 warm sandboxes; zero errors expected.

Two shapes of the same load, in the same run:

- callers (the figure): 1,000 callers, each bound to one sandbox (10 per sandbox, as rollouts hold
  theirs) and sending its 10 execs one after the other;
- a shared queue: 1,000 slots over one FIFO queue of 10,000 execs assigned to sandboxes round
  robin, whatever their backlog. Each sandbox gets an equal share of the CPU however much work it
  holds (the fairness between tenants), so nothing pulls a sandbox's backlog back to the others'
  and it drifts: the tail of this shape is that drift, not unfair serving.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from bench.common import Report, Stats


async def _one(sb: Any, lat: list[float]) -> bool:
    t = time.perf_counter()
    try:
        r = await sb.exec(["/bin/true"])
        ok = r.exit_code == 0
    except Exception:  # noqa: BLE001 (counted: the benchmark reports errors)
        ok = False
    lat.append(time.perf_counter() - t)
    return ok


async def burst(total: int, in_flight: int, sandboxes_n: int) -> dict[str, tuple[list[float], int, float]]:
    import sandboxes

    out = {}
    async with sandboxes.Pool(backend="local", warm=sandboxes_n) as pool:
        sbs = [await pool.claim() for _ in range(sandboxes_n)]
        await asyncio.gather(*(sb.exec(["/bin/true"]) for sb in sbs))

        lat: list[float] = []
        per_caller = total // in_flight

        async def caller(k: int) -> int:
            return sum([not await _one(sbs[k % sandboxes_n], lat) for _ in range(per_caller)])

        t0 = time.perf_counter()
        errors = sum(await asyncio.gather(*(caller(k) for k in range(in_flight))))
        out["callers"] = (lat, errors, time.perf_counter() - t0)

        lat2: list[float] = []
        sem = asyncio.Semaphore(in_flight)

        async def queued(i: int) -> bool:
            async with sem:
                return await _one(sbs[i % sandboxes_n], lat2)

        t0 = time.perf_counter()
        errors = sum([not ok for ok in await asyncio.gather(*(queued(i) for i in range(total)))])
        out["queue"] = (lat2, errors, time.perf_counter() - t0)
        await asyncio.gather(*(pool.release(sb) for sb in sbs))
    return out


def run(total: int = 10_000, in_flight: int = 1_000, sandboxes_n: int = 100) -> Report:
    rep = Report("burst")
    got = asyncio.run(burst(total, in_flight, sandboxes_n))
    lat, errors, wall = got["callers"]
    s = rep.add(
        Stats.of(f"exec /bin/true, {in_flight} callers bound to {sandboxes_n} sandboxes, 10 execs each", lat)
    )
    qlat, qerrors, qwall = got["queue"]
    q = rep.add(
        Stats.of(
            f"exec /bin/true, {in_flight} in flight from one queue, round robin over {sandboxes_n}", qlat
        )
    )
    rep.ratios["burst p99 / p50, callers (target <= 3)"] = s.p99_ms / s.median_ms
    rep.ratios["burst p99 / p50, one queue round robin"] = q.p99_ms / q.median_ms
    rep.extra.update(
        {
            "execs": total,
            "errors": errors,
            "wall_s": wall,
            "execs_per_s": total / wall,
            "queue_errors": qerrors,
            "queue_execs_per_s": total / qwall,
        }
    )
    rep.headline(
        f"burst: {total:,} execs, {in_flight:,} callers over {sandboxes_n} sandboxes",
        f"{total / wall:,.0f} execs/s, {errors} errors; latency {s.median_ms / 1000:.2f} s median, "
        f"{s.p99_ms / 1000:.2f} s p99",
        ratio="burst p99 / p50, callers (target <= 3)",
    )
    return rep
