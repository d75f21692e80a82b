"""Exec of /bin/true through the native client and the agent over its unix socket, against a
posix_spawn of /bin/true in this process, in the same run: back to back, and each after an idle
spell (as in real use, where a program runs after a model's turn; the kernel's cgroup and RCU state
goes cold in between)."""

from __future__ import annotations

import asyncio
import os
import time

from bench.common import Report, Stats

IDLE_S = 0.1


def posix_spawn_true(n: int, idle_s: float = 0.0) -> list[float]:
    out = []
    for _ in range(n):
        if idle_s:
            time.sleep(idle_s)
        t = time.perf_counter()
        pid = os.posix_spawn("/bin/true", ["/bin/true"], {})
        os.waitpid(pid, 0)
        out.append(time.perf_counter() - t)
    return out


async def native_exec_true(n: int, idle_s: float = 0.0) -> list[float]:
    import sandboxes

    async with sandboxes.Pool(backend="local", warm=1) as pool, pool.sandbox() as sb:
        for _ in range(20):  # warm the connection and caches
            await sb.exec(["/bin/true"])
        out = []
        for _ in range(n):
            if idle_s:
                await asyncio.sleep(idle_s)
            t = time.perf_counter()
            r = await sb.exec(["/bin/true"])
            out.append(time.perf_counter() - t)
            assert r.exit_code == 0, r
    return out


def run(n: int = 2000, n_idle: int = 100) -> Report:
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
    rep.headline("exec `/bin/true` through the native client and the agent", e, s, "median overhead ms")
    spawn, native = [], []
    for _ in range(2):
        spawn += posix_spawn_true(n_idle // 2, IDLE_S)
        native += asyncio.run(native_exec_true(n_idle // 2, IDLE_S))
    s = rep.add(Stats.of(f"posix_spawn /bin/true, {IDLE_S * 1000:g} ms idle before each (baseline)", spawn))
    e = rep.add(Stats.of(f"agent exec /bin/true, {IDLE_S * 1000:g} ms idle before each", native))
    rep.ratios["after idle: median ratio agent/posix_spawn"] = e.median_ms / s.median_ms
    rep.ratios["after idle: median overhead ms"] = e.median_ms - s.median_ms
    rep.headline(f"the same, {IDLE_S * 1000:g} ms idle before each", e, s, "after idle: median overhead ms")
    return rep
