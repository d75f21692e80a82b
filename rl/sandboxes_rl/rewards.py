"""Scoring programs, with infrastructure retries: the building blocks of the TRL and veRL adapters.

`score_batch` grades a trainer's whole batch in one go: a few sandboxes (lanes), each graded chunk
by chunk with `Sandbox.run_tests_batch` (one call for many programs), every case still its own
process in its own directory. `score_in_fresh_sandbox` judges one program in a sandbox of its own.
A retryable infrastructure failure (sandbox lost, pool exhausted, ...) is retried on a new sandbox up
to `retries` times and then raised -- a reward is only ever computed from a program's verdicts.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import Any

from sandboxes import Grading, InvalidRequest, Limits, SandboxError, TestCase, Verdict
from sandboxes.grading import build_batch, default_lanes, grade_in_lanes

from .overlap import PoolProvider, SandboxLease, as_provider
from .scoring import REWARD_MODES, Score, judge, score_of

__all__ = ["score_batch", "score_in_fresh_sandbox"]

log = logging.getLogger(__name__)


async def score_in_fresh_sandbox(
    source: Any,
    code: str,
    tests: Sequence[TestCase],
    *,
    language: str = "python",
    reward: str = "pass_rate",
    time_limit: float | None = None,
    memory_limit_mb: float | None = None,
    compare: str = "whitespace",
    retries: int = 1,
    claim_timeout: float | None = None,
) -> Score:
    """Judge `code` in a sandbox claimed for it from `source` (Pool, client or provider)."""
    if not tests:
        raise InvalidRequest("no test cases to judge against")
    if not code.strip():
        return Score.no_code(len(tests))
    attempt = 0
    while True:
        lease = SandboxLease(source, timeout=claim_timeout).start()
        try:
            sb = await lease.get()
            score = await judge(
                sb,
                code,
                tests,
                language=language,
                reward=reward,
                time_limit=time_limit,
                memory_limit_mb=memory_limit_mb,
                compare=compare,
            )
            return dataclasses.replace(score, extras={**score.extras, **lease.metrics()})
        except SandboxError as e:
            if isinstance(e, InvalidRequest) or not e.retryable or attempt >= retries:
                raise
            attempt += 1
            log.warning(
                "sandbox failure while scoring (%s); retrying on a new sandbox (%d/%d)", e, attempt, retries
            )
        finally:
            await lease.release()


async def score_batch(
    source: Any,
    jobs: Sequence[tuple[str, Sequence[TestCase], str]],
    *,
    reward: str = "pass_rate",
    time_limit: float | None = None,
    memory_limit_mb: float | None = None,
    compare: str = "whitespace",
    retries: int = 1,
    claim_timeout: float | None = None,
    max_concurrency: int = 64,
) -> list[Score]:
    """The scores of `(code, tests, language)` jobs, in their order, graded as one batch over a
    few sandboxes of `source` (Pool, client or provider): one per 8 programs, at most
    `max_concurrency` (on an embedded pool, at most as many as keep the machine's CPUs busy)."""
    if reward not in REWARD_MODES:
        raise InvalidRequest(f"reward mode must be one of {REWARD_MODES}, got {reward!r}")
    scores: list[Score | None] = [None] * len(jobs)
    todo: list[int] = []
    for i, (code, tests, _) in enumerate(jobs):
        if not tests:
            raise InvalidRequest(f"job {i}: no test cases to judge against")
        if code.strip():
            todo.append(i)
        else:
            scores[i] = Score.no_code(len(tests))
    if todo:
        reqs = build_batch(
            [Grading(jobs[i][0], list(jobs[i][1]), language=jobs[i][2]) for i in todo],
            base_limits=Limits(),
            time_limit=time_limit,
            memory_limit_mb=memory_limit_mb,
            compare=compare,
            one_call=False,
        )
        provider = as_provider(source)
        tmpl = None
        if isinstance(provider, PoolProvider):  # an embedded pool: its sandboxes share this machine
            pool = provider.pool
            tmpl = pool.templates.get(provider.template or pool.default_template)

        async def claim() -> Any:
            return await provider.acquire(timeout=claim_timeout)

        async def release(sb: Any) -> None:
            await sb.close()

        lanes = default_lanes(len(reqs), cap=max(1, max_concurrency), tmpl=tmpl)
        async for j, report in grade_in_lanes(reqs, claim, release, sandboxes=lanes, attempts=retries + 1):
            if any(c.verdict is Verdict.SANDBOX_ERROR for c in report.cases):
                message = next(c.message for c in report.cases if c.verdict is Verdict.SANDBOX_ERROR)
                raise SandboxError(f"the sandbox failed to judge job {todo[j]}: {message}")
            scores[todo[j]] = score_of(report, reward)
    return [s for s in scores if s is not None]
