"""Batch grading: many programs, each with its own tests and language, judged in one call.

```python
gradings = [sandboxes.Grading(src, tests, language="cpp") for src in completions]
async for i, report in sb.run_tests_batch(gradings, time_limit=2):   # one sandbox
    rewards[i] = report.pass_rate
async for i, report in pool.grade(gradings, time_limit=2):           # spread over the pool
    rewards[i] = report.pass_rate
```

In one sandbox the agent grades the submissions one after the other (or `parallelism` side by
side, for submissions of one trust domain: side by side they share the sandbox's user) and
answers each as it finishes; every case still runs as its own process in its own fresh
directory, exactly as with `run_tests`. `Pool.grade` keeps a few sandboxes busy with chunks of
the batch (a lane takes the next chunk when it is done with one), so submissions running at the
same time are in different sandboxes and a slow one holds up only its chunk's lane. Reports arrive in completion order with their index in the input; leaving the loop early
(or `cancel()`) kills what still runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Self

from . import languages
from .errors import InvalidRequest, SandboxError, SandboxLost
from .judging import CaseResult, RunTestsRequest, TestCase, TestReport, Verdict, build_run_tests_request
from .types import Limits

__all__ = [
    "MAX_BATCH",
    "MAX_BATCH_CASES",
    "GradeStream",
    "Grading",
    "build_batch",
    "default_lanes",
    "grade_in_lanes",
    "grade_on_pool",
    "host_lanes",
]

# The agent's bounds of one batch (sandbox_judge::MAX_BATCH / MAX_BATCH_CASES).
MAX_BATCH = 4096
MAX_BATCH_CASES = 100_000
# Gradings a pool lane sends per call: enough to amortize the call, few enough that the lanes
# finish together.
MAX_CHUNK = 32
# Gradings per lane below which another sandbox is not worth claiming.
MIN_PER_LANE = 8


@dataclass(frozen=True)
class Grading:
    """One submission of a batch: a program, its tests and language. The other fields are
    `run_tests`'s and override the batch's for this submission (None: the batch's); `limits`
    layer over the batch's limits, under this submission's `time_limit` / `memory_limit_mb`."""

    program: str
    tests: Sequence[TestCase]
    language: str = "python"
    time_limit: float | None = None
    memory_limit_mb: float | None = None
    limits: Limits | None = None
    compare: str | None = None
    float_tolerance: float | None = None
    stop_on_first_failure: bool | None = None


def build_batch(
    gradings: Any,
    *,
    base_limits: Limits,
    time_limit: float | None = None,
    memory_limit_mb: float | None = None,
    stop_on_first_failure: bool = False,
    compare: str = "whitespace",
    float_tolerance: float | None = None,
    limits: Limits | None = None,
    one_call: bool = True,
) -> list[RunTestsRequest]:
    """Validate a batch into one `RunTestsRequest` per grading (none for an empty batch); an
    error names the grading. `one_call`: the batch goes to the agent as it is, so within the
    bounds of one call (a pool's lanes send it in chunks, each within them)."""
    if isinstance(gradings, (str, bytes, Grading)) or not isinstance(gradings, Sequence):
        raise InvalidRequest("gradings must be a list of sandboxes.Grading")
    if one_call and len(gradings) > MAX_BATCH:
        raise InvalidRequest(f"{len(gradings)} gradings in one batch (max {MAX_BATCH})")
    out = []
    for i, g in enumerate(gradings):
        if not isinstance(g, Grading):
            raise InvalidRequest(f"submission {i}: expected sandboxes.Grading, got {type(g).__name__}")
        try:
            if g.limits is not None and not isinstance(g.limits, Limits):
                raise InvalidRequest(f"limits must be sandboxes.Limits, got {type(g.limits).__name__}")
            layered = g.limits if limits is None else limits.merged(g.limits)
            out.append(
                build_run_tests_request(
                    g.program,
                    g.tests,
                    language=g.language,
                    base_limits=base_limits,
                    time_limit=time_limit if g.time_limit is None else g.time_limit,
                    memory_limit_mb=memory_limit_mb if g.memory_limit_mb is None else g.memory_limit_mb,
                    stop_on_first_failure=(
                        stop_on_first_failure if g.stop_on_first_failure is None else g.stop_on_first_failure
                    ),
                    compare=compare if g.compare is None else g.compare,
                    float_tolerance=float_tolerance if g.float_tolerance is None else g.float_tolerance,
                    limits=layered,
                )
            )
        except InvalidRequest as e:
            raise InvalidRequest(f"submission {i}: {e.message}") from e
    cases = sum(len(r.tests) for r in out)
    if one_call and cases > MAX_BATCH_CASES:
        raise InvalidRequest(f"{cases} test cases in one batch (max {MAX_BATCH_CASES})")
    return out


def host_lanes(template: Any) -> int | None:
    """How many sandboxes of `template` keep this machine's CPUs busy, where sandboxes run on this
    machine (local and docker backends): its CPUs over the template's CPU quota, rounded up. More
    only add sandboxes to start and zygotes to warm. None where sandboxes run elsewhere."""
    if template.backend not in ("local", "docker"):
        return None
    cpus = len(os.sched_getaffinity(0)) or 1
    return max(1, math.ceil(cpus / template.cpu_quota)) if template.cpu_quota > 0 else cpus


def default_lanes(n: int, *, cap: int, tmpl: Any = None) -> int:
    """Sandboxes to grade `n` gradings in: one per `MIN_PER_LANE`, at most `cap` and, for a
    template whose sandboxes run on this machine, `host_lanes`."""
    bound = min(cap, (host_lanes(tmpl) if tmpl is not None else None) or cap)
    return max(1, min(math.ceil(n / MIN_PER_LANE), bound))


def batch_deadline(reqs: Sequence[RunTestsRequest]) -> float:
    """A generous bound of a batch's RPC: every grading one after the other."""
    return sum(r.deadline_s for r in reqs)


class GradeStream:
    """The reports of a batch as each finishes: an async iterator of `(index, TestReport)`.

    `cancel()` (or leaving `async with`, or `aclose()`) kills what still runs. A stream that ends
    before every grading was answered raises `SandboxLost`.

    `source` is any object with the native stream's `next()` (an `(index, report)` pair, None at
    the end) and `cancel()`; `convert` turns its reports into `TestReport`.
    """

    def __init__(self, source: Any, total: int, convert: Callable[[Any], TestReport] = lambda r: r) -> None:
        self._source = source
        self._convert = convert
        self.total = total
        self.answered: set[int] = set()
        self._done = False

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> tuple[int, TestReport]:
        if self._done:
            raise StopAsyncIteration
        try:
            item = await self._source.next()
        except BaseException:
            self.cancel()
            raise
        if item is None:
            self._done = True
            missing = self.total - len(self.answered)
            if missing:
                raise SandboxLost(f"the batch ended with {missing} of {self.total} gradings unanswered")
            raise StopAsyncIteration
        index, raw = item
        index = int(index)
        if not 0 <= index < self.total or index in self.answered:
            self.cancel()
            raise SandboxLost(f"the batch answered grading {index} of {self.total} twice or out of range")
        self.answered.add(index)
        return index, self._convert(raw)

    @classmethod
    def empty(cls) -> GradeStream:
        """The stream of an empty batch."""
        return cls(_NoResults(), 0)

    def cancel(self) -> None:
        """Kill what still runs (no-op once every grading was answered)."""
        if not self._done:
            self._done = True
            self._source.cancel()

    async def aclose(self) -> None:
        self.cancel()

    def __del__(self) -> None:
        # A loop left with `break` drops the stream: what still runs is killed then, not later.
        if not getattr(self, "_done", True):
            with contextlib.suppress(Exception):  # e.g. at exit, its event loop already closed
                self.cancel()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.cancel()


class _NoResults:
    async def next(self) -> None:
        return None

    def cancel(self) -> None:
        pass


def unjudged(req: RunTestsRequest, error: SandboxError) -> TestReport:
    """The report of a grading the infrastructure failed twice: each case a sandbox error."""
    case = CaseResult(verdict=Verdict.SANDBOX_ERROR, message=f"{error.kind.value}: {error.message}")
    return TestReport(cases=(case,) * len(req.tests), passed=0, total=len(req.tests))


async def grade_on_pool(
    pool: Any,
    gradings: Sequence[Grading],
    *,
    template: str | None,
    tmpl: Any,
    warm: int,
    sandboxes: int | None = None,
    chunk: int | None = None,
    **kwargs: Any,
) -> AsyncIterator[tuple[int, TestReport]]:
    """`Pool.grade`: the batch over `sandboxes` claimed sandboxes of `template` (default: one
    per `MIN_PER_LANE` gradings, at most the template's `warm` count and `host_lanes`), `chunk`
    gradings a call (see `grade_in_lanes`)."""
    reqs = build_batch(gradings, base_limits=tmpl.limits, one_call=False, **kwargs)
    if not reqs:
        return
    # The agent checks each chunk; what it would refuse is refused here, before any chunk runs.
    for i, r in enumerate(reqs):
        try:
            lang = languages.require(r.language)
        except InvalidRequest as e:
            raise InvalidRequest(f"submission {i}: {e.message}") from None
        if not lang.checks and any(check for _, _, check in r.tests):
            raise InvalidRequest(f"submission {i}: check scripts are not supported for {lang.name}")
    if sandboxes is None:
        sandboxes = default_lanes(len(reqs), cap=warm, tmpl=tmpl)

    async def claim() -> Any:
        return await pool.claim(template)

    async for item in grade_in_lanes(reqs, claim, pool.release, sandboxes=sandboxes, chunk=chunk):
        yield item


async def grade_in_lanes(
    reqs: Sequence[RunTestsRequest],
    claim: Callable[[], Awaitable[Any]],
    release: Callable[[Any], Awaitable[None]],
    *,
    sandboxes: int,
    chunk: int | None = None,
    attempts: int = 2,
) -> AsyncIterator[tuple[int, TestReport]]:
    """Validated requests over `sandboxes` lanes: each lane `claim()`s a sandbox and sends it
    `chunk` requests a call (default: about a quarter of its share, at most `MAX_CHUNK`; fewer
    when their cases would pass `MAX_BATCH_CASES`) until none are left, then `release(sb)`s it.
    `(index, report)` as each finishes.

    A lane whose sandbox fails mid-chunk releases it and puts the chunk's unanswered requests
    back; a request the infrastructure failed `attempts` times is reported with `sandbox_error`
    cases.
    """
    n = len(reqs)
    if isinstance(sandboxes, bool) or not isinstance(sandboxes, int) or sandboxes < 1:
        raise InvalidRequest(f"sandboxes must be an int >= 1, got {sandboxes!r}")
    lanes = min(sandboxes, n)
    if chunk is None:
        chunk = max(1, min(MAX_CHUNK, math.ceil(n / (4 * lanes))))
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise InvalidRequest(f"chunk must be an int >= 1, got {chunk!r}")

    todo: list[int] = list(range(n - 1, -1, -1))  # popped from the end: input order
    failures: dict[int, int] = {}
    out: asyncio.Queue[tuple[int, TestReport] | BaseException | None] = asyncio.Queue()

    async def lane() -> None:
        sb = None
        try:
            while todo:
                take = [todo.pop()]
                cases = len(reqs[take[0]].tests)
                while todo and len(take) < chunk and cases + len(reqs[todo[-1]].tests) <= MAX_BATCH_CASES:
                    cases += len(reqs[todo[-1]].tests)
                    take.append(todo.pop())
                if sb is None:
                    sb = await claim()
                done: set[int] = set()
                try:
                    async with sb._run_tests_batch([reqs[i] for i in take]) as stream:
                        async for j, report in stream:
                            done.add(take[j])
                            out.put_nowait((take[j], report))
                except InvalidRequest:
                    raise
                except SandboxError as e:
                    with contextlib.suppress(SandboxError):
                        await release(sb)
                    sb = None
                    for i in take:
                        if i in done:
                            continue
                        failures[i] = failures.get(i, 0) + 1
                        if failures[i] >= attempts or not e.retryable:
                            out.put_nowait((i, unjudged(reqs[i], e)))
                        else:
                            todo.append(i)
        except BaseException as e:  # noqa: BLE001 - handed to the consumer, which re-raises it
            out.put_nowait(e)
        finally:
            if sb is not None:
                with contextlib.suppress(SandboxError):
                    await release(sb)
            out.put_nowait(None)

    tasks = [asyncio.ensure_future(lane()) for _ in range(lanes)]
    try:
        running, answered = lanes, 0
        while answered < n:
            item = await out.get()
            if item is None:
                running -= 1
                if running == 0 and answered < n and out.empty():
                    raise SandboxLost(
                        f"the pool's lanes ended with {n - answered} of {n} gradings unanswered"
                    )
                continue
            if isinstance(item, BaseException):
                raise item
            answered += 1
            yield item
    finally:
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(BaseException):
                await t
