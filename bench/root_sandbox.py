"""Root sandboxes on the local backend: cold create of a root sandbox (own user namespace and id
range, writable root with an idmapped /usr overlay) beside the default judge sandbox (read-only
host /usr), alternated in one run so drift hits both alike; the first exec in each, and execs in
a claimed sandbox of each kind."""

from __future__ import annotations

import asyncio
import time

from bench.common import Report, Stats


async def alternated_creates(n: int = 60) -> dict[str, tuple[list[float], list[float]]]:
    import sandboxes

    templates = {"default": sandboxes.Template(), "root": sandboxes.Template(name="root", user="root")}
    out: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in templates}
    async with sandboxes.Pool(warm=0, templates=templates) as pool:
        for _ in range(n):
            for name in templates:
                t = time.perf_counter()
                async with pool.sandbox(template=name) as sb:
                    created = time.perf_counter()
                    await sb.exec(["/bin/true"])
                    out[name][0].append(created - t)
                    out[name][1].append(time.perf_counter() - created)
    return out


async def steady_execs(n: int = 500) -> dict[str, list[float]]:
    """Exec of /bin/true in a claimed sandbox of each kind, alternated: a root sandbox's programs
    enter its user namespace and attach the seccomp filter themselves."""
    import sandboxes

    templates = {"default": sandboxes.Template(), "root": sandboxes.Template(name="root", user="root")}
    out: dict[str, list[float]] = {k: [] for k in templates}
    pool = sandboxes.Pool(warm=0, templates=templates)
    async with pool, pool.sandbox(template="default") as d, pool.sandbox(template="root") as r:
        for sb in (d, r):
            await sb.exec(["/bin/true"])
        for _ in range(n):
            for name, sb in (("default", d), ("root", r)):
                t = time.perf_counter()
                await sb.exec(["/bin/true"])
                out[name].append(time.perf_counter() - t)
    return out


def run() -> Report:
    rep = Report("root_sandbox")
    got = asyncio.run(alternated_creates())
    d = rep.add(Stats.of("cold create, default sandbox (baseline)", got["default"][0]))
    r = rep.add(Stats.of("cold create, root sandbox", got["root"][0]))
    de = rep.add(Stats.of("first exec, default sandbox", got["default"][1]))
    re_ = rep.add(Stats.of("first exec, root sandbox", got["root"][1]))
    rep.ratios["cold create root / default (median)"] = r.median_ms / d.median_ms
    rep.ratios["first exec root / default (median)"] = re_.median_ms / de.median_ms
    steady = asyncio.run(steady_execs())
    ds = rep.add(Stats.of("exec /bin/true, default sandbox", steady["default"]))
    rs = rep.add(Stats.of("exec /bin/true, root sandbox", steady["root"]))
    rep.ratios["exec root / default (median)"] = rs.median_ms / ds.median_ms
    return rep
