"""Time to first command: a sandbox created, then `true` run in it, as a trainer provisions one
per rollout. One at a time (`SEQUENTIAL`), then in bursts of 100 and 1,000 creates at once,
through each way in: the embedded pool (`Pool()`, its defaults), our gRPC client, the Prime SDK
(`create`, `wait_for_creation`, `execute_command`) and the e2b SDK (`AsyncSandbox.create`,
`commands.run`), the last three against one `sandboxes serve` with its defaults
(`bench/served.py`), the SDKs unmodified in their client virtualenvs (`make clients`). Each
sandbox is deleted once its command ran. p50 and p99 per shape; the headline compares each
burst of 1,000 with the same way one at a time (what a burst costs a caller), and each SDK's
burst with our gRPC client's on the same server (what the SDK adds)."""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import Report, Stats

ROOT = Path(__file__).resolve().parent.parent
SEQUENTIAL = 30
BURSTS = (100, 1000)
E2B = ROOT / ".venv-clients" / "e2b" / "bin" / "python"
PRIME = ROOT / ".venv-clients" / "prime-current" / "bin" / "python"
SCENARIOS = ROOT / "tests" / "clients" / "e2b_scenarios.py"
PRIME_DRIVER = Path(__file__).with_name("prime_driver.py")


async def _shapes(one: Any) -> dict[str, list[float]]:
    """`one()` (seconds to a first command) one at a time, then in each burst."""
    out = {"sequential": [await one() for _ in range(SEQUENTIAL)]}
    for n in BURSTS:
        await asyncio.sleep(2.0)  # the warm set back
        out[str(n)] = list(await asyncio.gather(*(one() for _ in range(n))))
    return out


async def embedded() -> dict[str, list[float]]:
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
        return await _shapes(one)


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


async def measure() -> dict[str, dict[str, list[float]]]:
    from bench.served import run_driver, served

    for client in (E2B, PRIME):
        if not client.exists():
            raise SystemExit(f"{client} is missing: run `make clients`")
    results = {"embedded pool": await embedded()}
    shape = ",".join(str(n) for n in (SEQUENTIAL, *BURSTS))
    async with served() as server:
        results["gRPC client"] = await grpc(server.address, server.key)
        with tempfile.TemporaryDirectory() as home:
            env = {"PATH": os.environ["PATH"], "HOME": home}
            results["Prime SDK"] = await run_driver(
                [str(PRIME), str(PRIME_DRIVER), "first_commands", shape],
                {**env, "PRIME_API_KEY": server.key, "PRIME_API_BASE_URL": server.http_url},
            )
            results["e2b SDK"] = await run_driver(
                [str(E2B), str(SCENARIOS), "first_commands", shape],
                {
                    **env,
                    "E2B_API_URL": server.http_url,
                    "E2B_SANDBOX_URL": server.http_url,
                    "E2B_API_KEY": server.key,
                },
            )
    return results


def _s(ms: float) -> str:
    return f"{ms / 1000:.1f} s" if ms >= 1000 else f"{ms:.0f} ms"


def run() -> Report:
    rep = Report("first_command")
    results = asyncio.run(measure())
    stats: dict[tuple[str, str], Stats] = {}
    for way, shapes in results.items():
        for shape, samples in shapes.items():
            label = "one at a time" if shape == "sequential" else f"burst of {shape}"
            stats[way, shape] = rep.add(Stats.of(f"time to first command, {way}, {label}", samples))
    big = str(BURSTS[-1])
    for way in results:
        name = f"{way}: burst of {big} / one at a time (p50)"
        rep.ratios[name] = stats[way, big].median_ms / stats[way, "sequential"].median_ms
    for way in ("Prime SDK", "e2b SDK"):
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
    for way in ("Prime SDK", "e2b SDK"):
        rep.headline(
            f"time to first command through the {way}, a burst of {big} (vs our gRPC client's burst)",
            stats[way, big],
            stats["gRPC client", big],
            f"{way} / our gRPC client, burst of {big} (p50)",
        )
    return rep


if __name__ == "__main__":
    r = run()
    r.print()
    print(f"saved {r.save()}")
