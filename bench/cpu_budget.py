"""The CPU budget of one grading: where the CPU of `run_tests` goes, from the kernel's accounting
(/proc and each case's cgroup), so every change to the reward engine is judged against it.

HumanEval's 328 gradings (canonical + broken) in one warm local sandbox from one caller, after a
warm-up, once as one `run_tests` call each and once as one `run_tests_batch`; then as many empty
gradings (program `pass`, check `pass`) to tell the program's own CPU from the price of a case's
process. Milliseconds of CPU per grading:

- program: what a HumanEval program and its check cost beyond an empty one (the cases' cgroup
  CPU, less the empty grading's);
- fork/exit: a bare fork that exits at once, of the sandbox's interpreter with the zygote's
  imports and frozen heap (outside the sandbox, the fork floor's process): what any fresh process
  per case costs (measured once, the same in both columns);
- isolation set-up: the rest of an empty case's process (the worker's set-up after the fork: the
  request, its cgroup, rlimits, Landlock, the environment; the check runner; the pages it copies
  from the zygote) and the zygote's own work per fork;
- agent: RPC, the judge's files, the case's cgroup and Landlock rules, supervision and reaping
  (the agent process);
- client native: gRPC and the runtime threads of this process;
- client Python: conversion and asyncio (this process's main thread);
- other: the rest of the machine's CPU during the run (kernel threads, e.g. cgroup release; /proc
  counts in clock ticks, so within a few hundredths of a millisecond either way of zero);
- floor: the same program and check `exec()`'d in one process, for comparison.

And the page faults per grading, machine-wide (`pgfault` of /proc/vmstat): on a virtual machine
each costs microseconds, and a fresh process per case takes hundreds, so their count (which does
not vary from run to run) tells a change to the case's process apart from the machine's noise.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

from bench.common import Report

TICK = os.sysconf("SC_CLK_TCK")
ROWS = ("program", "fork/exit", "isolation set-up", "agent", "client native", "client Python", "other")
# A bare fork of the fork floor's process: imports what the zygote imports, freezes its heap, then
# forks argv[2] children that exit at once; prints the CPU (its own and its children's) per fork.
_BARE_FORKS = r"""
import gc, os, sys
for m in sys.argv[1].split(","):
    __import__(m)
gc.collect()
gc.freeze()
n = int(sys.argv[2])
t = os.times()
for _ in range(n):
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
u = os.times()
print((u.user + u.system + u.children_user + u.children_system - t.user - t.system - t.children_user - t.children_system) / n)
"""


def _stat_cpu(path: str) -> float:
    """utime + stime (s) of a /proc stat file, children excluded."""
    try:
        text = Path(path).read_text()
    except OSError:
        return 0.0
    fields = text[text.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def _children(pid: int, comm: str) -> list[int]:
    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            text = Path(f"/proc/{p}/stat").read_text()
        except OSError:
            continue
        if (
            text[text.index("(") + 1 : text.rindex(")")] == comm
            and int(text[text.rindex(")") + 2 :].split()[1]) == pid
        ):
            out.append(int(p))
    return out


def _pgfault() -> int:
    for line in Path("/proc/vmstat").read_text().splitlines():
        if line.startswith("pgfault "):
            return int(line.split()[1])
    return 0


def _bare_fork(n: int = 1000) -> float:
    """CPU (s) of one bare fork and exit of the fork floor's process (see `_BARE_FORKS`)."""
    import subprocess

    from bench.reward import _sandbox_python, zygote_preloads

    py = asyncio.run(_sandbox_python())
    out = subprocess.run(
        [py, "-I", "-c", _BARE_FORKS, ",".join(zygote_preloads()), str(n)],
        capture_output=True,
        text=True,
        check=True,
    )
    return float(out.stdout)


def _machine() -> float:
    v = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(v) - v[3] - v[4]) / TICK


class _Snapshot:
    def __init__(self, agent: int, zygotes: list[int]) -> None:
        me = os.getpid()
        self.machine = _machine()
        self.faults = _pgfault()
        self.main = _stat_cpu(f"/proc/{me}/task/{me}/stat")
        self.process = _stat_cpu(f"/proc/{me}/stat")
        self.agent = _stat_cpu(f"/proc/{agent}/stat")
        self.zygote = sum(_stat_cpu(f"/proc/{z}/stat") for z in zygotes)


async def _grade(sb: Any, gradings: list[Any], mode: str) -> tuple[float, float]:
    """(wall, cases' CPU) of one pass."""
    t = time.perf_counter()
    cases = 0.0
    if mode == "calls":
        for g in gradings:
            r = await sb.run_tests(g.program, g.tests, language=g.language, time_limit=10)
            cases += sum(c.cpu_time_s for c in r.cases)
    else:
        async for _, r in sb.run_tests_batch(gradings, time_limit=10):
            cases += sum(c.cpu_time_s for c in r.cases)
    return time.perf_counter() - t, cases


async def _budget(gradings: list[Any], empty: list[Any], fork: float) -> dict[str, dict[str, float]]:
    import sandboxes

    out: dict[str, dict[str, float]] = {}
    async with sandboxes.Pool(backend="local", warm=1, python_zygote="eager") as pool, pool.sandbox() as sb:
        agent = sb.handle.backend_data.pid
        await _grade(sb, gradings[:32], "batch")  # warm-up
        zygotes = _children(agent, "python3")
        n = len(gradings)
        for mode in ("calls", "batch"):
            _, empty_cases = await _grade(sb, empty, mode)
            a = _Snapshot(agent, zygotes)
            wall, cases = await _grade(sb, gradings, mode)
            b = _Snapshot(agent, zygotes)
            native = (b.process - a.process) - (b.main - a.main)
            used = {
                "program": (cases - empty_cases) / n,
                "fork/exit": fork,
                "isolation set-up": (empty_cases + b.zygote - a.zygote) / n - fork,
                "agent": (b.agent - a.agent) / n,
                "client native": native / n,
                "client Python": (b.main - a.main) / n,
            }
            used["other"] = (b.machine - a.machine) / n - sum(used.values())
            out[mode] = {k: 1000 * v for k, v in used.items()}
            out[mode]["total"] = 1000 * (b.machine - a.machine) / n
            out[mode]["wall"] = 1000 * wall / n
            out[mode]["page faults"] = (b.faults - a.faults) / n
    return out


def measure(rep: Report) -> dict[str, Any]:
    from bench.reward import _floor_chunk, humaneval_submissions
    from sandboxes import Grading, TestCase

    subs = humaneval_submissions()
    gradings = [Grading(s.program, s.problem.tests, language=s.language) for s in subs]
    empty = [Grading("pass", [TestCase(check="pass")])] * len(gradings)
    budget = asyncio.run(_budget(gradings, empty, _bare_fork()))
    items = [(s.program, s.problem.tests[0].check) for s in subs]
    t = time.process_time()
    _floor_chunk(items)
    floor = 1000 * (time.process_time() - t) / len(items)
    result = {"ms_per_grading": budget, "floor_ms_per_grading": floor, "gradings": len(gradings)}
    rep.extra["cpu_budget"] = result
    print(f"CPU per grading, ms (HumanEval, {len(gradings)} gradings, one warm sandbox, one caller):")
    print(f"  {'':18} {'one call each':>14} {'one batch':>10}")
    for row in (*ROWS, "total", "wall"):
        print(f"  {row:18} {budget['calls'][row]:14.3f} {budget['batch'][row]:10.3f}")
    print(
        f"  {'page faults':18} {budget['calls']['page faults']:14.0f} {budget['batch']['page faults']:10.0f}"
    )
    print(f"  {'floor (exec())':18} {floor:14.3f}")
    return result
