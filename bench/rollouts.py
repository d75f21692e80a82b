"""A sandbox per rollout: what the RL trainers' own pattern pays, against what a user would write
instead, in the same run.

- the per-rollout reward: HumanEval's 164 canonical programs, each in a sandbox of its own
  (`async with pool.sandbox()` then one `run_tests` with its check), 64 rollouts in flight on one
  `Pool()` with the defaults, its start counted; wall, and CPU per rollout from the machine's own
  accounting (/proc/stat: every process, the agents and their programs included, which a
  process's own rusage would miss). Baseline: a fresh `python3` of a clean venv per problem
  (program + check as a file), as many at once as the machine has cores: no isolation at all.
  The tuned row: the same with `python_zygote="eager"` (each sandbox starts its interpreter at
  once, whether it runs Python or not).

Time to first command, one at a time and in bursts, through every way in: `bench/first_command.py`.
"""

from __future__ import annotations

import asyncio
import os
import time

from bench.common import Report, Stats
from bench.reward import clean_python, fresh_python, humaneval_submissions

IN_FLIGHT = 64
TICK = os.sysconf("SC_CLK_TCK")


def machine_cpu_s() -> float:
    """CPU seconds the whole machine has spent, all processes and the kernel (not idle)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    return (sum(v) - v[3] - v[4]) / TICK


def budget_now() -> tuple[float, float, float]:
    """(machine CPU, this process's CPU, its reaped children's: the agents, which reaped their
    programs) in seconds."""
    t = os.times()
    return machine_cpu_s(), t.user + t.system, t.children_user + t.children_system


BUDGET: dict[str, dict[str, float]] = {}


async def per_rollout(subs, **template: object) -> tuple[float, float, int]:
    """Wall, machine CPU and accepted of one sandbox per rollout (`IN_FLIGHT` at once); the CPU
    budget per rollout in `BUDGET[mode]`: the manager (this process: pool, client, gRPC), the
    agents with their programs (reaped children), the rest (kernel threads and what was not
    reaped, e.g. a zygote killed with its sandbox)."""
    import sandboxes

    t, c = time.perf_counter(), machine_cpu_s()
    b0 = budget_now()
    async with sandboxes.Pool(**template) as pool:
        gate = asyncio.Semaphore(IN_FLIGHT)

        async def one(s) -> bool:
            async with gate, pool.sandbox() as sb:
                r = await sb.run_tests(s.program, s.problem.tests, language=s.language, time_limit=10)
                return r.all_passed

        accepted = sum(await asyncio.gather(*(one(s) for s in subs)))
    b1 = budget_now()
    total, manager, agents = (b1[i] - b0[i] for i in range(3))
    ms = 1000 / len(subs)
    BUDGET[str(template.get("python_zygote", "lazy"))] = {
        "manager": round(manager * ms, 1),
        "agents and programs": round(agents * ms, 1),
        "rest": round((total - manager - agents) * ms, 1),
        "total": round(total * ms, 1),
    }
    return time.perf_counter() - t, machine_cpu_s() - c, accepted


def run() -> Report:
    rep = Report("rollouts")
    subs = humaneval_submissions()[:164]  # the canonical programs (the broken ones follow)
    n = len(subs)
    items = [(s.program, s.problem.tests[0].check) for s in subs]
    c = machine_cpu_s()
    fresh_wall, fresh_verdicts = fresh_python(items, os.cpu_count() or 1, clean_python())
    fresh_cpu = machine_cpu_s() - c
    wall, cpu, accepted = asyncio.run(per_rollout(subs))
    ewall, ecpu, eaccepted = asyncio.run(per_rollout(subs, python_zygote="eager"))
    ours = rep.add(Stats.of(f"{n} rollouts, a sandbox each, defaults (wall)", [wall]))
    eager = rep.add(Stats.of(f"{n} rollouts, a sandbox each, eager zygote (wall)", [ewall]))
    fresh = rep.add(Stats.of(f"{n} problems, a fresh python3 each (wall)", [fresh_wall]))
    rep.ratios["rollouts: fresh python3 / ours (wall, target >= 2)"] = fresh.median_ms / ours.median_ms
    rep.ratios["rollouts: fresh python3 / ours (CPU, target >= 1)"] = fresh_cpu / cpu
    rep.ratios["rollouts: fresh python3 / ours with an eager zygote (wall)"] = (
        fresh.median_ms / eager.median_ms
    )
    ms = 1000 / n
    rep.extra.update(
        {
            "rollout CPU ms, defaults": round(cpu * ms, 1),
            "rollout CPU ms, eager zygote": round(ecpu * ms, 1),
            "problem CPU ms, fresh python3": round(fresh_cpu * ms, 1),
            "rollout CPU budget ms, defaults": BUDGET.get("lazy", {}),
            "rollout CPU budget ms, eager zygote": BUDGET.get("eager", {}),
            "accepted (defaults, eager, fresh)": f"{accepted}/{n}, {eaccepted}/{n}, {sum(fresh_verdicts)}/{n}",
        }
    )
    rep.headline(
        f"a sandbox per rollout: {n} HumanEval rewards, {IN_FLIGHT} in flight, "
        f"{cpu * ms:.0f} ms CPU each (fresh python3: {fresh_cpu * ms:.0f} ms)",
        ours,
        fresh,
        "rollouts: fresh python3 / ours (wall, target >= 2)",
    )
    return rep


if __name__ == "__main__":
    r = run()
    r.print()
    print(f"saved {r.save()}")
