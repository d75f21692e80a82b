"""Burst: 10,000 execs with 1,000 in flight over a warm pool; zero errors expected, p99 reported."""

from __future__ import annotations

import asyncio
import time

from bench.common import Report, Stats


async def burst(total: int, in_flight: int, sandboxes_n: int) -> tuple[list[float], int, float]:
    import sandboxes

    lat: list[float] = []
    errors = 0
    async with sandboxes.Pool(backend="local", warm=sandboxes_n) as pool:
        sbs = [await pool.claim() for _ in range(sandboxes_n)]
        sem = asyncio.Semaphore(in_flight)

        async def one(i: int) -> None:
            nonlocal errors
            async with sem:
                t = time.perf_counter()
                try:
                    r = await sbs[i % sandboxes_n].exec(["/bin/true"])
                    if r.exit_code != 0:
                        errors += 1
                except Exception:  # noqa: BLE001 (counted: the benchmark reports errors)
                    errors += 1
                lat.append(time.perf_counter() - t)

        t0 = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(total)))
        wall = time.perf_counter() - t0
        await asyncio.gather(*(pool.release(sb) for sb in sbs))
    return lat, errors, wall


def run(total: int = 10_000, in_flight: int = 1_000, sandboxes_n: int = 100) -> Report:
    rep = Report("burst")
    lat, errors, wall = asyncio.run(burst(total, in_flight, sandboxes_n))
    s = rep.add(Stats.of(f"exec /bin/true, {in_flight} in flight over {sandboxes_n} sandboxes", lat))
    rep.extra.update({"execs": total, "errors": errors, "wall_s": wall, "execs_per_s": total / wall})
    rep.headline(
        f"burst: {total:,} execs, {in_flight:,} in flight over {sandboxes_n} sandboxes",
        f"{total / wall:,.0f} execs/s, {errors} errors; latency {s.median_ms / 1000:.2f} s median, "
        f"{s.p99_ms / 1000:.2f} s p99",
    )
    return rep
