"""Exec of /bin/true through the native client and the agent over its unix socket, against a
posix_spawn of /bin/true in this process, in the same run."""

from __future__ import annotations

import asyncio
import os
import time

from bench.common import Report, Stats


def posix_spawn_true(n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        pid = os.posix_spawn("/bin/true", ["/bin/true"], {})
        os.waitpid(pid, 0)
        out.append(time.perf_counter() - t)
    return out


async def native_exec_true(n: int) -> list[float]:
    import sandboxes

    async with sandboxes.Pool(backend="local", warm=1) as pool, pool.sandbox() as sb:
        for _ in range(20):  # warm the connection and caches
            await sb.exec(["/bin/true"])
        out = []
        for _ in range(n):
            t = time.perf_counter()
            r = await sb.exec(["/bin/true"])
            out.append(time.perf_counter() - t)
            assert r.exit_code == 0, r
    return out


def run(n: int = 2000) -> Report:
    rep = Report("exec_true")
    # Interleave the two so drift of the machine hits both alike.
    spawn, native = [], []
    for _ in range(4):
        spawn += posix_spawn_true(n // 4)
        native += asyncio.run(native_exec_true(n // 4))
    s = rep.add(Stats.of("posix_spawn /bin/true (baseline)", spawn))
    e = rep.add(Stats.of("agent exec /bin/true (native client)", native))
    rep.ratios["median ratio agent/posix_spawn"] = e.median_ms / s.median_ms
    rep.ratios["median overhead ms"] = e.median_ms - s.median_ms
    rep.ratios["p99 overhead ms"] = e.p99_ms - s.p99_ms
    return rep
