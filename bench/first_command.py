"""Time to first command: a sandbox created, then `true` run in it, as a trainer provisions one per
rollout. One at a time (`SEQUENTIAL`), then in bursts of 100 and 1,000 creates at once, through
each way in: the embedded pool (`Pool()`, its defaults), our gRPC client, the Prime SDK
(`create`, `wait_for_creation`, `execute_command`), the e2b SDK (`AsyncSandbox.create`,
`commands.run`) and the Daytona SDK (`AsyncDaytona.create`, `process.exec`), the last four
against one `sandboxes serve` with its defaults (`bench/served.py`), the SDKs unmodified in
their client virtualenvs (`make clients`). Each sandbox is deleted once its command ran. p50 and
p99 per shape; the headline compares each burst of 1,000 with the same way one at a time (what a
burst costs a caller), and each SDK's burst with our gRPC client's on the same server (what the
SDK adds). A first command an SDK gave up on is left out of the times and counted in `failed`.

CPU per create (create, `true`, delete; over all of a way's creates, one at a time and the bursts,
and the warm set's refill until 2 s after its last), counted through cgroups
(`bench/cgroup_cpu.py`): the server's is that of a cgroup holding the server and every sandbox it
makes (its agents and their programs); the client's is this process's own for our gRPC client and
the driver process's for an SDK (its reaped children's rusage); the embedded pool has no server
apart: its row is everything (this process, its agents and their programs). Compared: the
server's CPU per create through each way against the embedded pool's (what serving a create over
the network costs the server). Without a usable cgroup the server's is the machine's (/proc/stat),
as `cpu source` says."""

from __future__ import annotations

import asyncio
import math
import os
import resource
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.cgroup_cpu import CpuScope
from bench.common import ROOT, Report, Stats, client_python

SEQUENTIAL = 30
BURSTS = (100, 1000)
CREATES = SEQUENTIAL + sum(BURSTS)
SETTLE_S = 2.0  # after a way's last create: the warm set's refill behind it, counted as its
E2B = client_python("e2b")
PRIME = client_python("prime-current")
DAYTONA = client_python("daytona")
DAYTONA_SCENARIOS = ROOT / "tests" / "clients" / "daytona_scenarios.py"
SCENARIOS = ROOT / "tests" / "clients" / "e2b_scenarios.py"
PRIME_DRIVER = Path(__file__).with_name("prime_driver.py")


async def _shapes(one: Any) -> dict[str, list[float]]:
    """`one()` (seconds to a first command) one at a time, then in each burst."""
    out = {"sequential": [await one() for _ in range(SEQUENTIAL)]}
    for n in BURSTS:
        await asyncio.sleep(2.0)  # the warm set back
        out[str(n)] = list(await asyncio.gather(*(one() for _ in range(n))))
    return out


async def embedded(scope: CpuScope, cpu: dict[str, dict[str, float]]) -> dict[str, list[float]]:
    """The embedded pool's shapes; its CPU per create (from its warm set made to `SETTLE_S` after
    its last create) in `cpu`."""
    import sandboxes

    async with sandboxes.Pool() as pool:

        async def one() -> float:
            t = time.perf_counter()
            async with pool.sandbox() as sb:
                r = await sb.exec(["true"])
                d = time.perf_counter() - t
            assert r.exit_code == 0, r
            return d

        await asyncio.sleep(2.0)
        t0 = scope.cpu_s()
        out = await _shapes(one)
        await asyncio.sleep(SETTLE_S)
        cpu["embedded pool"] = {"server": (scope.cpu_s() - t0) * 1000 / CREATES}
        return out


async def grpc(address: str, key: str) -> dict[str, list[float]]:
    from sandboxes.client import AsyncSandboxClient

    async with AsyncSandboxClient(address, api_key=key, timeout=300) as client:

        async def one() -> float:
            t = time.perf_counter()
            sb = await client.create(template="agent")
            r = await sb.exec(["true"])
            d = time.perf_counter() - t
            assert r.exit_code == 0, r
            await sb.close()
            return d

        return await _shapes(one)


def _children_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


async def measure(scope: CpuScope) -> tuple[dict[str, dict[str, list[float]]], dict[str, dict[str, float]]]:
    """Times to first command per way and shape, and CPU ms per create per way: {"server": ..,
    "client": ..} (see the module doc)."""
    from bench.served import run_driver, served

    for client in (E2B, PRIME, DAYTONA):
        if not client.exists():
            raise SystemExit(f"{client} is missing: run `make clients`")
    cpu: dict[str, dict[str, float]] = {}
    ms = 1000 / CREATES
    results = {"embedded pool": await embedded(scope, cpu)}
    shape = ",".join(str(n) for n in (SEQUENTIAL, *BURSTS))
    server_cg = scope.child("server")
    async with served(cgroup=server_cg) as server:

        async def way(name: str, run: Any) -> None:
            s0, p0, c0 = scope.cpu_s(server_cg), time.process_time(), _children_cpu_s()
            results[name] = await run
            await asyncio.sleep(SETTLE_S)
            own = time.process_time() - p0 if name == "gRPC client" else _children_cpu_s() - c0
            cpu[name] = {"server": (scope.cpu_s(server_cg) - s0) * ms, "client": own * ms}

        await way("gRPC client", grpc(server.address, server.key))
        with tempfile.TemporaryDirectory() as home:
            env = {"PATH": os.environ["PATH"], "HOME": home}
            await way(
                "Prime SDK",
                run_driver(
                    [str(PRIME), str(PRIME_DRIVER), "first_commands", shape],
                    {**env, "PRIME_API_KEY": server.key, "PRIME_API_BASE_URL": server.http_url},
                ),
            )
            await way(
                "e2b SDK",
                run_driver(
                    [str(E2B), str(SCENARIOS), "first_commands", shape],
                    {
                        **env,
                        "E2B_API_URL": server.http_url,
                        "E2B_SANDBOX_URL": server.http_url,
                        "E2B_API_KEY": server.key,
                    },
                ),
            )
            await way(
                "Daytona SDK",
                run_driver(
                    [str(DAYTONA), str(DAYTONA_SCENARIOS), "first_commands", shape],
                    {**env, "DAYTONA_API_URL": server.http_url + "/daytona", "DAYTONA_API_KEY": server.key},
                ),
            )
    return results, cpu


def _s(ms: float) -> str:
    return f"{ms / 1000:.1f} s" if ms >= 1000 else f"{ms:.0f} ms"


def run() -> Report:
    rep = Report("first_command")
    with CpuScope() as scope:
        results, cpu = asyncio.run(measure(scope))
    rep.extra["cpu source"] = scope.source
    for way, c in cpu.items():
        rep.extra[f"CPU ms per create: {way}"] = {k: round(v, 1) for k, v in c.items()}
    stats: dict[tuple[str, str], Stats] = {}
    for way, shapes in results.items():
        for shape, samples in shapes.items():
            label = "one at a time" if shape == "sequential" else f"burst of {shape}"
            done = [x for x in samples if not math.isnan(x)]  # a driver's failed first command
            if len(done) < len(samples):
                rep.extra[f"failed: {way}, {label}"] = f"{len(samples) - len(done)} of {len(samples)}"
            stats[way, shape] = rep.add(
                Stats.of(f"time to first command, {way}, {label}", done or [float("nan")])
            )
    big = str(BURSTS[-1])
    for way in results:
        name = f"{way}: burst of {big} / one at a time (p50)"
        rep.ratios[name] = stats[way, big].median_ms / stats[way, "sequential"].median_ms
    for way in ("Prime SDK", "e2b SDK", "Daytona SDK"):
        name = f"{way} / our gRPC client, burst of {big} (p50)"
        rep.ratios[name] = stats[way, big].median_ms / stats["gRPC client", big].median_ms
    ways = list(results)

    def medians(shape: str) -> str:
        return ", ".join(f"{w} {_s(stats[w, shape].median_ms)}" for w in ways)

    rep.headline(
        f"time to first command in a burst of {big} creates, p50 (vs one at a time)",
        medians(big),
        medians("sequential"),
    )
    for way in ("Prime SDK", "e2b SDK", "Daytona SDK"):
        rep.headline(
            f"time to first command through the {way}, a burst of {big} (vs our gRPC client's burst)",
            stats[way, big],
            stats["gRPC client", big],
            f"{way} / our gRPC client, burst of {big} (p50)",
        )
    small = str(BURSTS[0])
    rep.ratios[f"embedded pool: burst of {small} / one at a time (p99)"] = (
        stats["embedded pool", small].p99_ms / stats["embedded pool", "sequential"].p99_ms
    )
    rep.headline(
        f"time to first command in a burst of {small} creates, embedded pool (target 300 ms p99) "
        "(vs one at a time)",
        stats["embedded pool", small],
        stats["embedded pool", "sequential"],
        f"embedded pool: burst of {small} / one at a time (p99)",
    )
    base = cpu["embedded pool"]["server"]
    for way in ways[1:]:
        rep.ratios[
            f"{way}: server CPU per create / embedded pool's{', target <= 2' if 'SDK' in way else ''}"
        ] = cpu[way]["server"] / base
    rep.headline(
        f"server's CPU per create (create, `true`, delete; {CREATES} creates, bursts included), "
        "SDK's apart (vs the embedded pool's, everything)",
        ", ".join(f"{w} {cpu[w]['server']:.1f} ms (+ client {cpu[w]['client']:.1f} ms)" for w in ways[1:]),
        f"embedded pool {base:.1f} ms",
    )
    return rep


if __name__ == "__main__":
    r = run()
    r.print()
    print(f"saved {r.save()}")
