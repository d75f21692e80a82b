"""veRL adapter: `compute_score` for `custom_reward_function`, plus a batched variant.

```yaml
custom_reward_function:
  path: sandboxes_reward.py      # one line: from sandboxes_rl.verl import compute_score
  name: compute_score
  reward_kwargs: {reward: pass_rate}   # optional: language, time_limit, address, ...
```

(veRL loads `path` as a standalone file, so point it at a file that imports this module rather than
at this module itself, whose relative imports need its package.)

veRL calls `compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs)`
synchronously, once per sample. The program is the last fenced code block of `solution_str` (the
whole text without a fence); the tests come from `ground_truth` (any shape
`sandboxes_rl.scoring.tests_from_spec` reads, e.g. `{"inputs": [...], "outputs": [...]}` as JSON,
HumanEval's `{"test", "entry_point"}`, open-r1's `verification_info`), else from `extra_info["tests"]`
/ `extra_info["verification_info"]`; `extra_info["prefix"]` (e.g. a HumanEval prompt's import lines)
is put before the extracted code.

The work runs on a private event loop thread (`sandboxes_rl.runtime`): an embedded local pool by
default, the server at `$SANDBOXES_ADDRESS` when set (or `address=` in `reward_kwargs`). An
infrastructure failure is retried on a new sandbox, then raised: veRL never receives a false 0.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

from sandboxes import InvalidRequest

from .problems import program_of
from .rewards import score_batch, score_in_fresh_sandbox
from .runtime import SandboxRuntime, default_runtime
from .scoring import Score, extract_code, normalize_language, tests_from_spec

__all__ = ["compute_score", "compute_score_batch"]

_runtimes: dict[tuple[str, str | None], SandboxRuntime] = {}
_runtimes_lock = threading.Lock()


def _runtime(kwargs: dict[str, Any]) -> SandboxRuntime:
    rt = kwargs.pop("runtime", None)
    address = kwargs.pop("address", None)
    api_key = kwargs.pop("api_key", None)
    if rt is not None:
        return rt
    if address:
        with _runtimes_lock:
            key = (address, api_key)
            if key not in _runtimes or _runtimes[key]._closed:
                _runtimes[key] = SandboxRuntime(address=address, api_key=api_key)
            return _runtimes[key]
    return default_runtime()


def _job(
    solution_str: str, ground_truth: Any, extra_info: Any, language: str | None
) -> tuple[str, list, str]:
    info = extra_info if isinstance(extra_info, Mapping) else {}
    lang_hint = language or info.get("language")
    tests, spec_lang = tests_from_spec(ground_truth, lang_hint)
    if not tests:
        for key in ("tests", "verification_info", "test_cases"):
            if info.get(key) is not None:
                tests, spec_lang = tests_from_spec(info[key], lang_hint)
                break
    if not tests:
        raise InvalidRequest("no tests in ground_truth or extra_info: a code reward needs test cases")
    lang = normalize_language(lang_hint or spec_lang) or "python"
    return program_of(extract_code(solution_str or "", lang), info.get("prefix") or ""), tests, lang


def _score_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    allowed = {"reward", "time_limit", "memory_limit_mb", "compare", "retries", "claim_timeout"}
    return {k: v for k, v in kwargs.items() if k in allowed}


def _result(score: Score, return_dict: bool) -> float | dict[str, Any]:
    return score.as_dict() if return_dict else score.reward


def compute_score(
    data_source: str | None,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict | None = None,
    **kwargs: Any,
) -> float | dict[str, Any]:
    """The reward of one sample (pass rate by default; `reward="all_passed"` for 0/1).

    Keyword options: `language`, `reward`, `time_limit`, `memory_limit_mb`, `compare`, `retries`,
    `address` / `api_key` (a remote server), `runtime` (a `SandboxRuntime`), `return_dict` (a dict
    with "score" and the verdict counts, which veRL logs as extra metrics).
    """
    kwargs = dict(kwargs)
    return_dict = bool(kwargs.pop("return_dict", False))
    language = kwargs.pop("language", None)
    rt = _runtime(kwargs)
    code, tests, lang = _job(solution_str, ground_truth, extra_info, language)
    opts = _score_kwargs(kwargs)

    async def run() -> Score:
        return await score_in_fresh_sandbox(await rt.provider(), code, tests, language=lang, **opts)

    return _result(rt.call(run), return_dict)


def compute_score_batch(
    data_sources: Sequence[str | None],
    solution_strs: Sequence[str],
    ground_truths: Sequence[Any],
    extra_infos: Sequence[dict | None] | None = None,
    **kwargs: Any,
) -> list[float | dict[str, Any]]:
    """`compute_score` for a whole batch at once (veRL's batch reward manager), graded as one
    batch over a few sandboxes (`sandboxes_rl.rewards.score_batch`)."""
    kwargs = dict(kwargs)
    return_dict = bool(kwargs.pop("return_dict", False))
    language = kwargs.pop("language", None)
    max_concurrency = int(kwargs.pop("max_concurrency", 64))
    rt = _runtime(kwargs)
    infos = list(extra_infos) if extra_infos is not None else [None] * len(solution_strs)
    if not (len(solution_strs) == len(ground_truths) == len(infos)):
        raise InvalidRequest("solution_strs, ground_truths and extra_infos must have the same length")
    jobs = [_job(s, g, e, language) for s, g, e in zip(solution_strs, ground_truths, infos)]
    opts = _score_kwargs(kwargs)

    async def run() -> list[Score]:
        return await score_batch(await rt.provider(), jobs, max_concurrency=max_concurrency, **opts)

    return [_result(s, return_dict) for s in rt.call(run)]
