"""Pool benchmarks of the embedded local backend: warm claims under 256 concurrent claimers, cold
create, and exec round trips embedded and through the API server, against posix_spawn of
/bin/true measured in the same run."""

from __future__ import annotations

import asyncio
import time

from bench.common import Report, Stats
from bench.exec_latency import posix_spawn_true

BALLAST_MB = 1024


async def wait_warm(pool, n: int, bound_s: float = 600.0) -> None:
    """Benchmark-only wait for the background fill (tests wait on events instead)."""
    deadline = time.monotonic() + bound_s
    while pool.stats()[pool.default_template]["warm"] < n:
        if time.monotonic() > deadline:
            raise RuntimeError(f"pool did not reach {n} warm sandboxes")
        await asyncio.sleep(0.05)


async def warm_claims(claimers: int = 256, rounds: int = 3, **pool_kwargs: object) -> list[float]:
    """Claim latency of `claimers` concurrent claims on a full warm set (backend in `pool_kwargs`)."""
    import sandboxes

    out: list[float] = []
    pool_kwargs.setdefault("backend", "local")
    async with sandboxes.Pool(warm=claimers, **pool_kwargs) as pool:
        for _ in range(rounds):
            await wait_warm(pool, claimers)

            async def one() -> tuple[float, object]:
                t = time.perf_counter()
                sb = await pool.claim()
                return time.perf_counter() - t, sb

            got = await asyncio.gather(*(one() for _ in range(claimers)))
            out += [d for d, _ in got]
            await asyncio.gather(*(pool.release(sb) for _, sb in got))
    return out


async def cold_creates(n: int = 60) -> list[float]:
    from sandboxes.backends import get_backend
    from sandboxes.templates import Template

    backend = get_backend("local")
    tmpl = Template()
    out = []
    try:
        for i in range(n):
            t = time.perf_counter()
            h = await backend.create(tmpl, f"bench-{i}")
            out.append(time.perf_counter() - t)
            await backend.destroy(h)
    finally:
        await backend.close()
    return out


def ballast(mb: int) -> list[bytearray]:
    """`mb` MB of touched memory in this process, as a trainer holding a model has."""
    out = [bytearray(1 << 20) for _ in range(mb)]
    for b in out:
        b[::4096] = b"\x01" * len(b[::4096])
    return out


async def first_execs_after_claim(n: int = 40) -> tuple[list[float], list[float]]:
    """The first and second exec of /bin/true in a sandbox right after its claim, while the pool
    starts its replacement (as an RL rollout does: claim, then run at once)."""
    import sandboxes

    first, second = [], []
    async with sandboxes.Pool(backend="local", warm=2) as pool:
        for _ in range(n):
            await wait_warm(pool, 2)
            await asyncio.sleep(0.2)  # the previous round's destroy is over
            async with pool.sandbox() as sb:
                t = time.perf_counter()
                await sb.exec(["/bin/true"])
                first.append(time.perf_counter() - t)
                t = time.perf_counter()
                await sb.exec(["/bin/true"])
                second.append(time.perf_counter() - t)
    return first, second


async def exec_embedded_and_remote(n: int) -> tuple[list[float], list[float]]:
    import sandboxes
    from sandboxes.server.app import Server

    emb, rem = [], []
    server = await Server(port=0, insecure=True, warm=2).start()
    try:
        async with (
            sandboxes.Pool(backend="local", warm=1) as pool,
            pool.sandbox() as sb,
            sandboxes.AsyncSandboxClient(f"127.0.0.1:{server.port}") as client,
        ):
            rsb = await client.create()
            try:
                for _ in range(50):
                    await sb.exec(["/bin/true"])
                    await rsb.exec(["/bin/true"])
                for _ in range(n):
                    t = time.perf_counter()
                    await sb.exec(["/bin/true"])
                    emb.append(time.perf_counter() - t)
                    t = time.perf_counter()
                    await rsb.exec(["/bin/true"])
                    rem.append(time.perf_counter() - t)
            finally:
                await client.delete(rsb.id)
    finally:
        await server.stop()
    return emb, rem


def run() -> Report:
    rep = Report("pool")
    spawn = rep.add(Stats.of("posix_spawn /bin/true (baseline)", posix_spawn_true(1000)))
    emb, rem = asyncio.run(exec_embedded_and_remote(1000))
    e = rep.add(Stats.of("exec /bin/true embedded (Pool)", emb))
    r = rep.add(Stats.of("exec /bin/true via API server", rem))
    rep.ratios["exec embedded / posix_spawn (median)"] = e.median_ms / spawn.median_ms
    rep.ratios["exec via server / posix_spawn (median)"] = r.median_ms / spawn.median_ms
    rep.headline("exec `/bin/true`, embedded `Pool`", e, spawn, "exec embedded / posix_spawn (median)")
    rep.headline(
        "exec `/bin/true` through the API server", r, spawn, "exec via server / posix_spawn (median)"
    )
    cold = rep.add(Stats.of("cold create (local backend)", asyncio.run(cold_creates())))
    held = ballast(BALLAST_MB)
    big = rep.add(
        Stats.of(f"cold create, this client holding {BALLAST_MB} MB more", asyncio.run(cold_creates()))
    )
    del held
    rep.ratios[f"cold create with {BALLAST_MB} MB more / without (median)"] = big.median_ms / cold.median_ms
    rep.headline("cold create, local backend (target 30 ms)", cold)
    first, second = asyncio.run(first_execs_after_claim())
    f = rep.add(Stats.of("first exec right after a claim (refill running)", first))
    s = rep.add(Stats.of("second exec right after a claim", second))
    rep.ratios["first / second exec after a claim (median)"] = f.median_ms / s.median_ms
    rep.headline(
        "first exec right after a claim, the pool refilling",
        f,
        s,
        "first / second exec after a claim (median)",
    )
    warm = rep.add(Stats.of("warm claim, 256 concurrent claimers", asyncio.run(warm_claims())))
    rep.headline("warm claim, 256 concurrent claimers (target 1 ms)", warm)
    return rep
