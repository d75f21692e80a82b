"""The CPU a sandbox costs over its life, per sandbox, as a trainer that gives each rollout its
own sandbox pays it: `N` sandboxes, `IN_FLIGHT` at a time, each claimed from a `Pool` with its
defaults (the warm set refilled behind it), then closed (destroyed):

- life: claim and close, no command (create, refill and destroy);
- + true: with `true` run in it (the first command);
- + python: with `python3 -c pass` run in it (the first Python run: the interpreter's start in a
  fresh sandbox).

For the default template (the host's `/usr` read-only, a work dir), a root template (`user="root"`:
a writable root of its own in a user namespace, the kind the Prime and E2B APIs serve) and the
docker backend (when an engine answers). CPU is the machine's (/proc/stat: every process and the
kernel, the agents and the container engine included), split into this process (the manager),
its reaped children (the local agents with their programs) and the rest; wall per sandbox too.
Baseline in the same run: the same commands as fresh processes of this process (`true`, and
`python3 -c pass` of a clean venv: no site hooks): what running them without a sandbox costs."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from bench.common import Report, Stats
from bench.reward import clean_python
from bench.rollouts import budget_now

N = 200
IN_FLIGHT = 8
COMMANDS = {"life": None, "+ true": ["true"], "+ python": ["python3", "-c", "pass"]}


async def lives(pool: Any, template: str, argv: list[str] | None) -> tuple[float, dict[str, float]]:
    """Wall and CPU budget (ms per sandbox) of `N` sandbox lives on a started pool."""
    gate = asyncio.Semaphore(IN_FLIGHT)

    async def one() -> None:
        async with gate, pool.sandbox(template=template) as sb:
            if argv is not None:
                r = await sb.exec(argv)
                assert r.exit_code == 0, r

    await asyncio.sleep(2.0)  # the warm set made
    t, b0 = time.perf_counter(), budget_now()
    await asyncio.gather(*(one() for _ in range(N)))
    await asyncio.sleep(2.0)  # the refill behind the last ones, counted as theirs
    b1 = budget_now()
    total, manager, agents = (b1[i] - b0[i] for i in range(3))
    ms = 1000 / N
    return (time.perf_counter() - t - 2.0) / N, {
        "manager": round(manager * ms, 2),
        "agents and programs": round(agents * ms, 2),
        "rest": round((total - manager - agents) * ms, 2),
        "total": round(total * ms, 2),
    }


async def kind(**pool_kwargs: Any) -> dict[str, tuple[float, dict[str, float]]]:
    import sandboxes

    templates = pool_kwargs.pop("templates", None)
    template = next(iter(templates)) if templates else "default"
    out = {}
    async with sandboxes.Pool(templates=templates, **pool_kwargs) as pool:
        for label, argv in COMMANDS.items():
            out[label] = await lives(pool, template, argv)
    return out


async def fresh(argv: list[str]) -> tuple[float, float]:
    """Wall and machine CPU (ms per process) of `argv` as `N` fresh processes, `IN_FLIGHT` at once."""
    gate = asyncio.Semaphore(IN_FLIGHT)

    async def one() -> None:
        async with gate:
            p = await asyncio.create_subprocess_exec(*argv)
            assert await p.wait() == 0

    t, b0 = time.perf_counter(), budget_now()
    await asyncio.gather(*(one() for _ in range(N)))
    return (time.perf_counter() - t) * 1000 / N, (budget_now()[0] - b0[0]) * 1000 / N


def _docker() -> bool:
    try:
        import docker

        docker.from_env().ping()
        from sandboxes.backends.docker import DEFAULT_IMAGE

        docker.from_env().images.get(DEFAULT_IMAGE)
        return True
    except Exception:  # noqa: BLE001 - no engine or no image: the row is left out
        return False


def run() -> Report:
    import sandboxes

    rep = Report("sandbox_cost")
    kinds = {
        "default": {},
        "root": {"templates": {"root": sandboxes.Template(name="root", user="root")}},
    }
    if _docker():
        kinds["docker"] = {"backend": "docker"}
    results = {name: asyncio.run(kind(**kw)) for name, kw in kinds.items()}
    base = {
        "true": asyncio.run(fresh(["true"])),
        "python": asyncio.run(fresh([clean_python(), "-c", "pass"])),
    }
    for name, rows in results.items():
        for label, (wall, budget) in rows.items():
            rep.add(Stats.of(f"{name}: sandbox {label} (wall per sandbox)", [wall]))
            rep.extra[f"{name}: sandbox {label}, CPU ms per sandbox"] = budget
    for label, (wall_ms, cpu_ms) in base.items():
        rep.add(Stats.of(f"fresh {label} on the host (wall per process)", [wall_ms / 1000]))
        rep.extra[f"fresh {label} on the host, CPU ms per process"] = round(cpu_ms, 2)
    default = results["default"]
    cpu = {label: budget["total"] for label, (_, budget) in default.items()}
    rep.ratios["default sandbox life + true / fresh true (CPU)"] = cpu["+ true"] / base["true"][1]
    rep.ratios["first python3 in a sandbox / fresh python3 (CPU)"] = (cpu["+ python"] - cpu["life"]) / base[
        "python"
    ][1]
    rep.headline(
        "CPU of a sandbox per rollout: created, `true` run, destroyed (default template)",
        f"{cpu['+ true']:.1f} ms CPU",
        f"{base['true'][1]:.1f} ms (a fresh `true` on the host)",
        "default sandbox life + true / fresh true (CPU)",
    )
    return rep


if __name__ == "__main__":
    r = run()
    r.print()
    for k, v in r.extra.items():
        print(f"{k}: {v}")
    print(f"saved {r.save()}")
