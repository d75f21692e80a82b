"""The CPU a sandbox costs over its life, per sandbox, as a trainer that gives each rollout its
own sandbox pays it: `N` sandboxes, `IN_FLIGHT` at a time, each claimed from a `Pool` with its
defaults (the warm set refilled behind it), then closed (destroyed):

- life: claim and close, no command (create, refill and destroy);
- + true: with `true` run in it (the first command);
- + python: with `python3 -c pass` run in it (the first Python run: the interpreter's start in a
  fresh sandbox).

For the default template (the host's `/usr` read-only, a work dir), a root template (`user="root"`:
a writable root of its own in a user namespace, the kind the Prime and E2B APIs serve) and the
docker backend (when an engine answers). CPU is counted through a cgroup that holds this process
and everything it starts (`bench/cgroup_cpu.py`: the agents, their programs and zygotes, the
baselines' processes; not the other work on the machine, not kernel threads, and not the
container engine, which the docker backend's containers run under: its row's CPU is this
process's and the CLI's only), split into this process (the manager) and the rest (agents and
programs); without a usable cgroup, the machine's (/proc/stat), as `cpu source` says. Wall per
sandbox too. Baselines in the same run, as fresh processes of this process, `IN_FLIGHT` at once:
the same commands (`true`, and `python3 -c pass` of a clean venv: no site hooks), what running them
without a sandbox costs; and the floor of a sandbox's life, `unshare -Urmpinf --mount-proc true`
(new user, mount, pid, ipc, net and uts namespaces with a fresh `/proc`, then `true`). The ratio
of a default sandbox's life (+ true) to that floor is measured apart, the two interleaved over
`ROUNDS` rounds on one pool (its warm set idle while the floor runs), so that the drift of a
shared machine hits both alike; the median of the rounds' ratios."""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

from bench.cgroup_cpu import CpuScope
from bench.common import Report, Stats
from bench.reward import clean_python

N = 200
IN_FLIGHT = 8
COMMANDS = {"life": None, "+ true": ["true"], "+ python": ["python3", "-c", "pass"]}
UNSHARE = ["unshare", "-Urmpinf", "--mount-proc", "true"]
ROUNDS = 3
WARM_UP_S = 300.0


async def lives(
    scope: CpuScope, pool: Any, template: str, argv: list[str] | None
) -> tuple[float, dict[str, float]]:
    """Wall and CPU budget (ms per sandbox) of `N` sandbox lives on a started pool."""
    gate = asyncio.Semaphore(IN_FLIGHT)

    async def one() -> None:
        async with gate, pool.sandbox(template=template) as sb:
            if argv is not None:
                r = await sb.exec(argv)
                assert r.exit_code == 0, r

    await asyncio.sleep(2.0)  # the warm set made
    t, b0 = time.perf_counter(), scope.now()
    await asyncio.gather(*(one() for _ in range(N)))
    await asyncio.sleep(2.0)  # the refill behind the last ones, counted as theirs
    b1 = scope.now()
    return (time.perf_counter() - t - 2.0) / N, CpuScope.split(b0, b1, N, digits=2)


async def kind(
    scope: CpuScope, **pool_kwargs: Any
) -> tuple[dict[str, tuple[float, dict[str, float]]], list[tuple[float, float]]]:
    """Each of `COMMANDS`' lives on one pool; for the default template (no arguments) also the
    floor rounds: (life + true, unshare) CPU ms per sandbox and per process, interleaved."""
    import sandboxes

    templates = pool_kwargs.pop("templates", None)
    template = next(iter(templates)) if templates else "default"
    out, rounds = {}, []
    default = not pool_kwargs and templates is None
    async with sandboxes.Pool(templates=templates, **pool_kwargs) as pool:
        # One life first, unmeasured and allowed `WARM_UP_S`: an engine's first containers of an
        # image it has not started yet take far longer than the claims' own wait.
        async with pool.sandbox(template=template, timeout=WARM_UP_S) as sb:
            await sb.exec(["true"])
        for label, argv in COMMANDS.items():
            out[label] = await lives(scope, pool, template, argv)
        for _ in range(ROUNDS if default else 0):
            _, life = await lives(scope, pool, template, ["true"])
            _, floor = await fresh(scope, UNSHARE)
            rounds.append((life["total"], floor))
    return out, rounds


async def fresh(scope: CpuScope, argv: list[str]) -> tuple[float, float]:
    """Wall and CPU (ms per process) of `argv` as `N` fresh processes, `IN_FLIGHT` at once."""
    gate = asyncio.Semaphore(IN_FLIGHT)

    async def one() -> None:
        async with gate:
            p = await asyncio.create_subprocess_exec(*argv)
            assert await p.wait() == 0

    t, b0 = time.perf_counter(), scope.cpu_s()
    await asyncio.gather(*(one() for _ in range(N)))
    return (time.perf_counter() - t) * 1000 / N, (scope.cpu_s() - b0) * 1000 / N


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
    with CpuScope() as scope:
        ran = {name: asyncio.run(kind(scope, **kw)) for name, kw in kinds.items()}
        base = {
            "true": asyncio.run(fresh(scope, ["true"])),
            "python": asyncio.run(fresh(scope, [clean_python(), "-c", "pass"])),
            "unshare": asyncio.run(fresh(scope, UNSHARE)),
        }
    rep.extra["cpu source"] = scope.source
    results = {name: rows for name, (rows, _) in ran.items()}
    rounds = ran["default"][1]
    rep.extra["default sandbox life + true vs unshare, interleaved: CPU ms per round"] = [
        {"life + true": life, "unshare": round(floor, 2)} for life, floor in rounds
    ]
    life_true = statistics.median(life for life, _ in rounds)
    floor = statistics.median(f for _, f in rounds)
    for name, rows in results.items():
        for label, (wall, budget) in rows.items():
            rep.add(Stats.of(f"{name}: sandbox {label} (wall per sandbox)", [wall]))
            rep.extra[f"{name}: sandbox {label}, CPU ms per sandbox"] = budget
    for label, (wall_ms, cpu_ms) in base.items():
        rep.add(Stats.of(f"fresh {label} on the host (wall per process)", [wall_ms / 1000]))
        rep.extra[f"fresh {label} on the host, CPU ms per process"] = round(cpu_ms, 2)
    rep.extra["fresh unshare on the host"] = " ".join(UNSHARE)
    default = results["default"]
    cpu = {label: budget["total"] for label, (_, budget) in default.items()}
    rep.ratios["default sandbox life + true / unshare -Urmpinf --mount-proc true (CPU, target <= 1.5)"] = (
        statistics.median(life / f for life, f in rounds)
    )
    rep.ratios["default sandbox life / unshare -Urmpinf --mount-proc true (CPU, one each)"] = (
        cpu["life"] / base["unshare"][1]
    )
    rep.ratios["default sandbox life + true / fresh true (CPU)"] = cpu["+ true"] / base["true"][1]
    rep.ratios["first python3 in a sandbox / fresh python3 (CPU)"] = (cpu["+ python"] - cpu["life"]) / base[
        "python"
    ][1]
    rep.headline(
        "CPU of a sandbox's life: created, `true` run, destroyed (default template; every process, through a cgroup)",
        f"{life_true:.1f} ms CPU",
        f"{floor:.1f} ms (`unshare -Urmpinf --mount-proc true`)",
        "default sandbox life + true / unshare -Urmpinf --mount-proc true (CPU, target <= 1.5)",
    )
    return rep


if __name__ == "__main__":
    r = run()
    r.print()
    for k, v in r.extra.items():
        print(f"{k}: {v}")
    print(f"saved {r.save()}")
