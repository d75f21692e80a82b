"""TRL adapters: an async code reward function and a tool environment (`environment_factory`).

Nothing here imports `trl`: these are plain callables and classes with the shapes `GRPOTrainer`
expects (`pip install 'sandboxes-rl[trl]'` brings TRL itself).

```python
from trl import GRPOTrainer
from sandboxes_rl.trl import SandboxCodeEnv, code_reward

trainer = GRPOTrainer(model=..., train_dataset=ds,        # ds columns: prompt + tests (per sample)
                      reward_funcs=code_reward,
                      environment_factory=SandboxCodeEnv)  # optional: python / bash tools
```

`code_reward(prompts, completions, **kwargs) -> list[float | None]` reads each sample's tests from
the dataset columns TRL passes as keyword lists: `verification_info`, `tests`, `test_cases`,
`ground_truth` or `input_output` (any shape `tests_from_spec` reads), or HumanEval's `test` +
`entry_point`; an optional `language` column, and a `prefix` column (e.g. a HumanEval prompt's import
lines) put before the model's code. A sample without tests gets None (TRL ignores it). The
completions' programs (each the last fenced block) are graded as one batch over a few sandboxes
(`sandboxes_rl.rewards.score_batch`; every case its own process in its own directory); an
infrastructure failure is retried on a new sandbox and then raised -- never a reward of 0.

`SandboxCodeEnv.reset()` starts provisioning the rollout's sandbox and returns at once; the `python`
and `bash` tools wait for it only at the first call. Both run on a `SandboxRuntime` (default: the
process-wide one, see `sandboxes_rl.runtime`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Sequence
from typing import Any

from sandboxes import ExecResult, InvalidRequest, SandboxError

from .overlap import SandboxLease
from .problems import program_of
from .rewards import score_batch
from .runtime import SandboxRuntime, default_runtime
from .scoring import REWARD_MODES, Score, completion_text, extract_code, normalize_language, tests_from_spec

__all__ = ["SandboxCodeEnv", "code_reward", "format_exec_result", "make_code_reward"]

TEST_KEYS = ("verification_info", "tests", "test_cases", "ground_truth", "input_output")


def _sample_specs(kwargs: dict[str, Any], n: int, tests_key: str | None) -> list[Any]:
    def column(key: str) -> list[Any] | None:
        col = kwargs.get(key)
        if col is None:
            return None
        if not isinstance(col, Sequence) or isinstance(col, (str, bytes)) or len(col) != n:
            raise InvalidRequest(f"reward kwarg {key!r} must be a list with one entry per completion")
        return list(col)

    if tests_key is not None:
        col = column(tests_key)
        if col is None:
            raise InvalidRequest(f"no {tests_key!r} column was passed to the reward function")
        return col
    for key in TEST_KEYS:
        col = column(key)
        if col is not None:
            return col
    tests, entries = column("test"), column("entry_point")
    if tests is not None and entries is not None:
        return [
            {"test": t, "entry_point": e} if t is not None and e else None for t, e in zip(tests, entries)
        ]
    raise InvalidRequest(
        f"the reward function found no tests: give a dataset column among {', '.join(TEST_KEYS)} "
        "(or HumanEval's test + entry_point), or name one with tests_key="
    )


def make_code_reward(
    runtime: SandboxRuntime | None = None,
    *,
    reward: str = "pass_rate",
    language: str | None = None,
    tests_key: str | None = None,
    time_limit: float | None = None,
    memory_limit_mb: float | None = None,
    compare: str = "whitespace",
    retries: int = 1,
    max_concurrency: int = 64,
    name: str = "code_reward",
):
    """An async TRL reward function `(prompts, completions, **kwargs) -> list[float | None]`."""
    if reward not in REWARD_MODES:
        raise InvalidRequest(f"reward must be one of {REWARD_MODES}, got {reward!r}")

    async def code_reward(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float | None]:
        rt = runtime or default_runtime()
        n = len(completions)
        specs = _sample_specs(kwargs, n, tests_key)
        langs = kwargs.get("language")
        prefixes = kwargs.get("prefix")
        envs = kwargs.get("environments")
        jobs: list[tuple[int, str, list, str]] = []
        out: list[float | None] = [None] * n
        for i, (completion, spec) in enumerate(zip(completions, specs)):
            if envs is not None and i < len(envs):
                err = getattr(envs[i], "infra_error", None)
                if err is not None:
                    raise err  # the rollout itself hit an infrastructure failure: no reward at all
            lang_i = language or (
                langs[i] if isinstance(langs, Sequence) and not isinstance(langs, str) else None
            )
            tests, spec_lang = tests_from_spec(spec, lang_i)
            if not tests:
                continue
            lang = normalize_language(lang_i or spec_lang) or "python"
            code = extract_code(completion_text(completion), lang)
            if isinstance(prefixes, Sequence) and not isinstance(prefixes, str) and prefixes[i]:
                code = program_of(code, prefixes[i])
            jobs.append((i, code, tests, lang))

        async def score_all() -> list[Score]:
            return await score_batch(
                await rt.provider(),
                [(code, tests, lang) for _, code, tests, lang in jobs],
                reward=reward,
                time_limit=time_limit,
                memory_limit_mb=memory_limit_mb,
                compare=compare,
                retries=retries,
                max_concurrency=max_concurrency,
            )

        if jobs:
            for (i, *_), score in zip(jobs, await rt.run(score_all)):
                out[i] = score.reward
        return out

    code_reward.__name__ = code_reward.__qualname__ = name
    return code_reward


#: The default reward function: pass rate of each completion's program on its tests, judged on the
#: default runtime.
code_reward = make_code_reward()


def format_exec_result(r: ExecResult, max_chars: int = 4000) -> str:
    """A tool answer: stdout, stderr, and the exit status when the program did not succeed."""
    out = r.stdout.decode("utf-8", "replace")
    err = r.stderr.decode("utf-8", "replace")
    text = out
    if err:
        text += ("\n" if text and not text.endswith("\n") else "") + "stderr:\n" + err
    if r.timed_out:
        text += "\n[timed out]"
    elif r.oom_killed:
        text += "\n[killed: out of memory]"
    elif r.signal:
        text += f"\n[killed by signal {r.signal}]"
    elif r.exit_code != 0:
        text += f"\n[exit code {r.exit_code}]"
    if r.output_truncated:
        text += "\n[output truncated]"
    if len(text) > max_chars:
        text = text[:max_chars] + f"\n[... {len(text) - max_chars} more characters]"
    return text or "(no output)"


class SandboxCodeEnv:
    """A TRL `environment_factory` class: one sandbox per rollout, `python` and `bash` tools.

    `reset()` starts provisioning and returns None at once (the prompt is left as it is). Every
    public method but `reset` is a tool for TRL, so everything else here is private. An
    infrastructure failure inside a tool is answered to the model as an error (TRL's behaviour)
    *and* kept in `infra_error`, which `code_reward` raises for that rollout.
    """

    tool_timeout_s: float = 10.0
    max_output_chars: int = 4000

    def __init__(
        self,
        runtime: SandboxRuntime | None = None,
        *,
        tool_timeout_s: float | None = None,
        max_output_chars: int | None = None,
    ) -> None:
        self._rt = runtime
        if tool_timeout_s is not None:
            self.tool_timeout_s = tool_timeout_s
        if max_output_chars is not None:
            self.max_output_chars = max_output_chars
        self._pending: concurrent.futures.Future[SandboxLease] | None = None
        self.infra_error: SandboxError | None = None

    def _runtime(self) -> SandboxRuntime:
        if self._rt is None:
            self._rt = default_runtime()
        return self._rt

    def reset(self, **kwargs: Any) -> str | None:
        """Start provisioning this rollout's sandbox (returns at once) and release the previous one."""
        rt = self._runtime()
        old = self._pending
        self.infra_error = None

        async def start() -> SandboxLease:
            lease = await rt.lease()
            if old is not None:  # in the background: the new rollout does not wait for it
                task = asyncio.get_running_loop().create_task(_release_future(old))
                _background.add(task)
                task.add_done_callback(_background.discard)
            return lease

        self._pending = rt.submit(start)
        return None

    async def python(self, code: str) -> str:
        """Run a Python program in this rollout's sandbox and return what it printed.

        Args:
            code: The Python source code to run.

        Returns:
            The program's stdout and stderr, with its exit status when it failed.
        """
        return await self._exec(["python3", "-c", code])

    async def bash(self, command: str) -> str:
        """Run a bash command in this rollout's sandbox and return what it printed.

        Args:
            command: The shell command to run.

        Returns:
            The command's stdout and stderr, with its exit status when it failed.
        """
        return await self._exec(["/bin/bash", "-c", command])

    async def _exec(self, argv: list[str]) -> str:
        if self._pending is None:
            self.reset()
        pending = self._pending
        assert pending is not None
        rt = self._runtime()

        async def run() -> str:
            lease = await asyncio.wrap_future(pending)
            sb = await lease.get()
            r = await sb.exec(argv, timeout=self.tool_timeout_s)
            return format_exec_result(r, self.max_output_chars)

        try:
            return await rt.run(run)
        except InvalidRequest:
            raise  # the model's request was bad (e.g. a NUL in the code): TRL tells the model
        except SandboxError as e:
            self.infra_error = e
            raise

    @property
    def sandbox_ready_wait_s(self) -> float | None:
        """Provisioning the rollout waited for (None until its first tool call)."""
        if self._pending is None or not self._pending.done() or self._pending.exception():
            return None
        return self._pending.result().ready_wait_s

    def _release(self) -> None:
        """Release this rollout's sandbox now (the runtime's close releases all of them anyway)."""
        pending, self._pending = self._pending, None
        if pending is not None:
            self._runtime().call(lambda: _release_future(pending))


_background: set[asyncio.Task] = set()


async def _release_future(fut: concurrent.futures.Future[SandboxLease]) -> None:
    try:
        lease = await asyncio.wrap_future(fut)
    except Exception:  # noqa: BLE001 - provisioning failed: nothing to release
        return
    await lease.release()
