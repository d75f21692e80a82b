"""Scoring one program in a sandbox of its own, with infrastructure retries.

The building block of the TRL and veRL adapters: claim a fresh sandbox, judge, release. A retryable
infrastructure failure (sandbox lost, pool exhausted, ...) is retried on a new sandbox up to `retries`
times and then raised -- a reward is only ever computed from a program's verdicts.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import Any

from sandboxes import InvalidRequest, SandboxError, TestCase

from .overlap import SandboxLease
from .scoring import Score, judge

__all__ = ["score_in_fresh_sandbox"]

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
