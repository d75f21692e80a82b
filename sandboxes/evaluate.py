"""Grade a problem set through an embedded pool: the engine of `sandboxes eval`.

```
sandboxes eval humaneval                            # canonical solutions: expect 100 %
sandboxes eval stdio --solutions broken             # deliberately wrong ones: expect 0 %
sandboxes eval humaneval --solutions samples.jsonl --workers 8 --output report.json
```

Each submission (a problem and a program) is one `run_tests` call, `workers` at once. The
workers share as many sandboxes as keep this machine's CPUs busy (`grading.host_lanes`), each
running at most its CPU quota of gradings at once and grading up to `per_sandbox` submissions
before a fresh one takes its place: the judge runs every case as its own process in its own fresh
directory, so consecutive gradings do not meet each other's processes or files, and the Python
zygote started with the sandbox serves them all. A failing program is a verdict; an
infrastructure failure drops the sandbox and is retried once on a fresh one, then recorded as
`sandbox_error` with its message (and the command exits 125). A solutions file is JSONL, one submission a line: `{"problem_id" | "task_id", "program" |
"solution" | "completion", "language"?}`; a `completion` is appended to the problem's prompt
(HumanEval samples), a `program` / `solution` is the whole program.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .datasets import DatasetError, Problem
from .datasets.problem import read_jsonl
from .errors import InvalidRequest, SandboxError
from .judging import TestReport, Verdict

__all__ = ["EvalReport", "ProblemResult", "Submission", "evaluate", "load_problems", "load_solutions", "main"]

DATASETS = ("humaneval", "stdio")
DEFAULT_TIME_LIMIT_S = 10.0
DEFAULT_PER_SANDBOX = 64
EXIT_INFRA = 125


@dataclass(frozen=True)
class Submission:
    """One program to grade against one problem."""

    problem: Problem
    program: str
    language: str


@dataclass(frozen=True)
class ProblemResult:
    """The outcome of one submission: its verdict (the first failing case's, or accepted)."""

    problem_id: str
    language: str
    verdict: str
    passed: int
    total: int
    duration_s: float
    message: str = ""
    cases: tuple[str, ...] = ()
    infra_error: bool = False

    @property
    def accepted(self) -> bool:
        return self.verdict == Verdict.ACCEPTED.value


@dataclass
class EvalReport:
    """Every submission's result, with totals and throughput."""

    dataset: str
    solutions: str
    workers: int
    results: list[ProblemResult] = field(default_factory=list)
    elapsed_s: float = 0.0  # grading only (the pool's first sandboxes are ready before)
    startup_s: float = 0.0

    @property
    def accepted(self) -> int:
        return sum(r.accepted for r in self.results)

    @property
    def pass_rate(self) -> float:
        return self.accepted / len(self.results) if self.results else 0.0

    @property
    def infra_errors(self) -> int:
        return sum(r.infra_error for r in self.results)

    @property
    def throughput(self) -> float:
        """Problems graded per second."""
        return len(self.results) / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def verdict_counts(self) -> dict[str, int]:
        """How many submissions got each verdict, most frequent first."""
        return dict(Counter(r.verdict for r in self.results).most_common())

    def to_dict(self) -> dict[str, Any]:
        return {
            "dataset": self.dataset,
            "solutions": self.solutions,
            "workers": self.workers,
            "problems": len(self.results),
            "accepted": self.accepted,
            "pass_rate": self.pass_rate,
            "verdicts": self.verdict_counts(),
            "infra_errors": self.infra_errors,
            "elapsed_s": self.elapsed_s,
            "startup_s": self.startup_s,
            "problems_per_s": self.throughput,
            "results": [{**asdict(r), "cases": list(r.cases)} for r in self.results],
        }


# --- inputs --------------------------------------------------------------------------------------


def load_problems(dataset: str, data: str | Path | None = None) -> list[Problem]:
    """The problems of `dataset` ("humaneval" | "stdio"), from `data` when given."""
    from . import datasets

    if dataset == "humaneval":
        return datasets.load_humaneval_jsonl(data) if data else datasets.load_humaneval()
    if dataset == "stdio":
        return datasets.load_verification_jsonl(data) if data else datasets.load_stdio()
    raise DatasetError(f"unknown dataset {dataset!r} (known: {', '.join(DATASETS)})")


def load_solutions(path: str | Path, problems: Sequence[Problem]) -> list[Submission]:
    """The submissions of a solutions JSONL file (see the module docstring)."""
    by_id = {p.problem_id: p for p in problems}
    subs = []
    for n, rec in read_jsonl(path):
        where = f"{path}:{n}"
        pid = rec.get("problem_id", rec.get("task_id"))
        if pid is None:
            raise DatasetError(f"{where}: no problem_id / task_id")
        problem = by_id.get(str(pid))
        if problem is None:
            raise DatasetError(f"{where}: unknown problem {pid!r}")
        if "completion" in rec:
            program = problem.prompt + str(rec["completion"])
        elif "program" in rec or "solution" in rec:
            program = str(rec.get("program", rec.get("solution")))
        else:
            raise DatasetError(f"{where}: no program / solution / completion")
        subs.append(Submission(problem, program, str(rec.get("language") or problem.language)))
    return subs


def submissions(problems: Sequence[Problem], solutions: str, language: str | None = None) -> list[Submission]:
    """ "canonical" (the references), "broken" (wrong on purpose) or a solutions file's submissions.

    With "canonical", problems without a reference in the language are left out.
    """
    if solutions == "canonical":
        return [
            Submission(p, p.references[language or p.language], language or p.language)
            for p in problems
            if (language or p.language) in p.references
        ]
    if solutions == "broken":
        return [Submission(p, p.broken(language), language or p.language) for p in problems]
    return load_solutions(solutions, problems)


# --- grading -------------------------------------------------------------------------------------


def _result(sub: Submission, report: TestReport) -> ProblemResult:
    failing = next((c for c in report.cases if not c.accepted), None)
    message = failing.message if failing else ""
    if failing is not None and failing.verdict is Verdict.COMPILE_ERROR and report.compile_output:
        message = report.compile_output.decode("utf-8", "replace")[:500]
    return ProblemResult(
        problem_id=sub.problem.problem_id,
        language=sub.language,
        verdict=report.verdict.value,
        passed=report.passed,
        total=report.total,
        duration_s=report.duration_s,
        message=message,
        cases=tuple(c.verdict.value for c in report.cases),
    )


def _failed(sub: Submission, e: SandboxError) -> ProblemResult:
    infra = not isinstance(e, InvalidRequest)
    return ProblemResult(
        problem_id=sub.problem.problem_id,
        language=sub.language,
        verdict=Verdict.SANDBOX_ERROR.value,
        passed=0,
        total=len(sub.problem.tests),
        duration_s=0.0,
        message=f"{e.kind.value}: {e.message}",
        infra_error=infra,
    )


class _Lane:
    """One sandbox shared by the workers of a lane, used for up to `per_sandbox` gradings and then
    replaced by a fresh one (the old one is released once its last grading is done). Every case
    already runs as its own process in its own fresh directory (see the judge), so gradings in
    one sandbox do not see each other's processes or working files; recycling bounds what a
    submission could leave in the sandbox's shared /tmp. At most `slots` gradings run in it at
    once (its CPUs): the lane's other workers wait their turn here, rather than side by side in a
    sandbox whose CPU quota they would exceed together (throttled, it idles its share)."""

    def __init__(self, pool: Any, per_sandbox: int, slots: int) -> None:
        self.pool, self.per_sandbox = pool, per_sandbox
        self.slots = asyncio.Semaphore(slots)
        self.sb: Any = None
        self.used = 0
        self.inflight: Counter[str] = Counter()
        self.retired: dict[str, Any] = {}
        self.lock = asyncio.Lock()

    async def take(self) -> Any:
        async with self.lock:
            if self.sb is not None and self.used >= self.per_sandbox:
                self._retire(self.sb)
            if self.sb is None:
                self.sb = await self.pool.claim()
                self.used = 0
            self.used += 1
            self.inflight[self.sb.id] += 1
            return self.sb

    async def give_back(self, sb: Any, lost: bool = False) -> None:
        """The end of one grading in `sb`; `lost`: the sandbox failed, take no more gradings to it."""
        if lost and sb is self.sb:
            self._retire(sb)
        self.inflight[sb.id] -= 1
        if sb.id in self.retired and self.inflight[sb.id] <= 0:
            del self.retired[sb.id], self.inflight[sb.id]
            await self.pool.release(sb)

    def _retire(self, sb: Any) -> None:
        self.retired[sb.id] = sb
        if sb is self.sb:
            self.sb = None

    async def close(self) -> None:
        if self.sb is not None:
            self._retire(self.sb)
        for sid, sb in list(self.retired.items()):
            if self.inflight[sid] <= 0:
                del self.retired[sid]
                await self.pool.release(sb)


async def grade(lane: _Lane, sub: Submission, **run_kwargs: Any) -> ProblemResult:
    """One submission; an infrastructure failure drops the sandbox and is retried once on a fresh one."""
    for attempt in (1, 2):
        async with lane.slots:
            result = await _attempt(lane, sub, attempt, **run_kwargs)
        if result is not None:
            return result
    raise AssertionError("unreachable")


async def _attempt(lane: _Lane, sub: Submission, attempt: int, **run_kwargs: Any) -> ProblemResult | None:
    """One try of `grade`; None: retry on a fresh sandbox."""
    sb, lost = None, False
    try:
        sb = await lane.take()
        report = await sb.run_tests(sub.program, sub.problem.tests, language=sub.language, **run_kwargs)
        return _result(sub, report)
    except SandboxError as e:
        if isinstance(e, InvalidRequest):
            return _failed(sub, e)
        lost = True
        if not e.retryable or attempt == 2:
            return _failed(sub, e)
    finally:
        if sb is not None:
            await lane.give_back(sb, lost)
    return None


async def evaluate(
    subs: Sequence[Submission],
    *,
    workers: int = 4,
    pool: Any = None,
    on_result: Callable[[ProblemResult], None] | None = None,
    dataset: str = "",
    solutions: str = "",
    per_sandbox: int = DEFAULT_PER_SANDBOX,
    **run_kwargs: Any,
) -> EvalReport:
    """Grade every submission with at most `workers` at once; results keep the input order.

    `pool`: a started `sandboxes.Pool` (default: a local one, closed at the end). The workers
    share as many sandboxes as keep this machine's CPUs busy where sandboxes run on it (local and
    docker: `grading.host_lanes`; one per worker elsewhere): more workers than that add calls in
    flight, not sandboxes to start. Each sandbox grades up to `per_sandbox` submissions before a
    fresh one takes its place (1: a fresh sandbox per submission). `run_kwargs` go to `run_tests`
    (time_limit, memory_limit_mb, ...).
    """
    from .grading import host_lanes
    from .pool import Pool
    from .templates import Template

    if workers < 1:
        raise InvalidRequest(f"workers must be >= 1, got {workers}")
    if per_sandbox < 1:
        raise InvalidRequest(f"per_sandbox must be >= 1, got {per_sandbox}")
    report = EvalReport(dataset=dataset, solutions=solutions, workers=workers)
    t0 = time.monotonic()
    own = pool is None
    templates = getattr(pool, "templates", None) or {}
    template = templates.get(getattr(pool, "default_template", None)) or Template()
    lanes = min(workers, host_lanes(template) or workers, len(subs)) or 1
    if own:
        # Python submissions: each sandbox's zygote starts with it, not during its first grading.
        zygote = "eager" if any(s.language == "python" for s in subs) else "lazy"
        pool = Pool(warm=lanes, claim_timeout=120.0, python_zygote=zygote)
        await pool.start()
    try:
        report.startup_s = time.monotonic() - t0
        results: list[ProblemResult | None] = [None] * len(subs)
        queue: asyncio.Queue[int] = asyncio.Queue()
        for i in range(len(subs)):
            queue.put_nowait(i)

        slots = max(1, math.ceil(template.cpu_quota)) if template.cpu_quota > 0 else workers
        shared = [_Lane(pool, per_sandbox, slots) for _ in range(lanes)]

        async def worker(lane: _Lane) -> None:
            while not queue.empty():
                i = queue.get_nowait()
                results[i] = r = await grade(lane, subs[i], **run_kwargs)
                if on_result is not None:
                    on_result(r)

        t1 = time.monotonic()
        try:
            async with asyncio.TaskGroup() as tg:
                for k in range(min(workers, len(subs)) or 1):
                    tg.create_task(worker(shared[k % lanes]))
        finally:
            for lane in shared:
                await lane.close()
        report.elapsed_s = time.monotonic() - t1
        report.results = [r for r in results if r is not None]
    finally:
        if own:
            await pool.close()
    return report


# --- command line --------------------------------------------------------------------------------


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of `sandboxes eval`."""
    p.add_argument("dataset", choices=DATASETS)
    p.add_argument(
        "--solutions",
        default="canonical",
        metavar="canonical|broken|FILE.jsonl",
        help="what to grade: the reference solutions (default), broken ones, or a JSONL file",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=4,
        help="gradings in flight (they share as many sandboxes as keep the CPUs busy)",
    )
    p.add_argument(
        "--per-sandbox",
        type=int,
        default=DEFAULT_PER_SANDBOX,
        metavar="N",
        help=f"submissions graded in one sandbox before a fresh one is taken (default {DEFAULT_PER_SANDBOX}; "
        "1: a fresh sandbox each)",
    )
    p.add_argument("--output", "-o", default=None, help="write the JSON report here")
    p.add_argument("--limit", type=int, default=None, metavar="K", help="grade only the first K")
    p.add_argument("--data", default=None, metavar="FILE", help="read the problems from this JSONL file")
    p.add_argument("--language", default=None, help="language of the canonical / broken solutions")
    p.add_argument("--time-limit", type=float, default=DEFAULT_TIME_LIMIT_S, help="per case, seconds")
    p.add_argument("--memory-limit-mb", type=float, default=None, help="per case")


def _summary(report: EvalReport) -> str:
    verdicts = ", ".join(f"{k} {v}" for k, v in report.verdict_counts().items()) or "-"
    lines = [
        (
            f"{report.dataset} ({report.solutions}): {report.accepted}/{len(report.results)} accepted, "
            f"pass rate {100 * report.pass_rate:.1f}%"
        ),
        f"verdicts: {verdicts}",
        (
            f"throughput: {report.throughput:.1f} problems/s ({len(report.results)} in "
            f"{report.elapsed_s:.2f} s, {report.workers} workers; pool start {report.startup_s:.2f} s)"
        ),
    ]
    if report.infra_errors:
        lines.append(f"infrastructure errors: {report.infra_errors}")
    return "\n".join(lines)


def main(args: argparse.Namespace, run: Callable[[Callable[[], Any]], Any] | None = None) -> int:
    """`sandboxes eval`: grade, show progress on stderr, print a summary, write the report."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    def err(msg: str) -> int:
        print(f"sandboxes: {msg}", file=sys.stderr)
        return 2

    if args.workers < 1:
        return err("--workers must be >= 1")
    if args.per_sandbox < 1:
        return err("--per-sandbox must be >= 1")
    if args.limit is not None and args.limit < 0:
        return err("--limit must be >= 0")
    try:
        problems = load_problems(args.dataset, args.data)
        subs = submissions(problems, args.solutions, args.language)
    except DatasetError as e:
        return err(str(e))
    if args.limit is not None:
        subs = subs[: args.limit]
    if not subs:
        return err("nothing to grade")
    run_kwargs: dict[str, Any] = {"time_limit": args.time_limit}
    if args.memory_limit_mb is not None:
        run_kwargs["memory_limit_mb"] = args.memory_limit_mb

    console = Console(stderr=True)
    progress = Progress(
        TextColumn("[bold]grading"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("accepted {task.fields[ok]}"),
        TimeElapsedColumn(),
        console=console,
        disable=not console.is_terminal,
    )
    task = progress.add_task("grading", total=len(subs), ok=0)
    ok = 0

    def on_result(r: ProblemResult) -> None:
        nonlocal ok
        ok += r.accepted
        progress.update(task, advance=1, ok=ok)

    async def go() -> EvalReport:
        return await evaluate(
            subs,
            workers=args.workers,
            per_sandbox=args.per_sandbox,
            on_result=on_result,
            dataset=args.dataset,
            solutions=args.solutions,
            **run_kwargs,
        )

    try:
        with progress:
            report = (run or (lambda f: asyncio.run(f())))(go)
    except SandboxError as e:
        err(f"{e.kind.value}: {e.message}")
        return EXIT_INFRA
    print(_summary(report))
    if args.output:
        Path(args.output).write_text(json.dumps(report.to_dict(), indent=2) + "\n")
        print(f"report: {args.output}")
    return EXIT_INFRA if report.infra_errors else 0
