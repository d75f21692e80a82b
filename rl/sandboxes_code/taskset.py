"""The tasks of `sandboxes-code` and their reward (see the package docstring)."""

from __future__ import annotations

import logging
from typing import Any

import verifiers.v1 as vf
from sandboxes_rl.problems import problem_rows, program_of
from sandboxes_rl.rewards import score_in_fresh_sandbox
from sandboxes_rl.runtime import SandboxRuntime, default_runtime
from sandboxes_rl.scoring import REWARD_MODES, extract_code, tests_from_spec

from sandboxes import InvalidRequest, SandboxError

__all__ = ["CodeData", "CodeTask", "CodeTaskConfig", "CodeTaskset", "CodeTasksetConfig"]

log = logging.getLogger(__name__)

# Where the judge's sandboxes come from; `default_runtime()` unless a caller sets one.
_runtime: SandboxRuntime | None = None


def use_runtime(runtime: SandboxRuntime | None) -> None:
    """Judge on `runtime` (None: the process-wide `default_runtime()`)."""
    global _runtime
    _runtime = runtime


class CodeData(vf.TaskData):
    """One problem: its tests (the JSON spec `sandboxes_rl.scoring.tests_from_spec` reads), its
    language, the import lines the program is judged after, and a reference solution."""

    tests: str
    language: str = "python"
    prefix: str = ""
    reference: str = ""


class CodeTaskConfig(vf.TaskConfig):
    reward: str = "pass_rate"  # or "all_passed"
    time_limit: float | None = None  # per test case, s (None: the judge's default)
    memory_limit_mb: float | None = None
    compare: str = "whitespace"
    retries: int = 1  # infrastructure retries of the judging, on a fresh sandbox


class CodeTask(vf.Task[CodeData, vf.State, CodeTaskConfig]):
    @vf.reward(weight=1.0)
    async def pass_rate(self, trace: vf.Trace) -> float:
        """The judged program's pass rate on the problem's tests (or 1/0 with `reward=all_passed`)."""
        cfg = self.config
        if cfg.reward not in REWARD_MODES:
            raise InvalidRequest(f"reward must be one of {REWARD_MODES}, got {cfg.reward!r}")
        boot = trace.timing.boot
        if boot.start:
            trace.record_metric("sandbox_ready_wait_s", boot.duration)
        tests, spec_language = tests_from_spec(self.data.tests, self.data.language)
        if not tests:
            raise InvalidRequest(f"task {self.data.id} has no tests")
        language = spec_language or self.data.language or "python"
        code = extract_code(trace.last_reply, language)
        trace.record_metric("has_code", float(bool(code.strip())))
        program = program_of(code, self.data.prefix)
        rt = _runtime or default_runtime()

        async def score() -> Any:
            return await score_in_fresh_sandbox(
                await rt.provider(),
                program,
                tests,
                language=language,
                reward=cfg.reward,
                time_limit=cfg.time_limit,
                memory_limit_mb=cfg.memory_limit_mb,
                compare=cfg.compare,
                retries=cfg.retries,
            )

        try:
            s = await rt.run(score) if code.strip() else None
        except InvalidRequest:
            raise  # a broken task or configuration: neither the model's fault nor the sandbox's
        except SandboxError as e:
            raise vf.SandboxError(f"judging failed: {e.kind.value}: {e.message}") from e
        if s is None:
            trace.record_metric("all_passed", 0.0)
            return 0.0
        trace.record_metric("all_passed", float(s.all_passed))
        trace.info["verdict"] = s.verdict
        return s.reward


class CodeTasksetConfig(vf.TasksetConfig):
    problems: str = "humaneval"  # or "stdio"
    num_examples: int = -1
    problem_ids: list[str] | None = None
    task: CodeTaskConfig = CodeTaskConfig()


class CodeTaskset(vf.Taskset[CodeTask, CodeTasksetConfig]):
    def load(self) -> Any:
        cfg = self.config
        for row in problem_rows(cfg.problems, num_examples=cfg.num_examples, problem_ids=cfg.problem_ids):
            info = row["info"]
            yield CodeTask(
                CodeData(
                    id=info["problem_id"],
                    name=info["problem_id"],
                    prompt=row["question"],
                    tests=info["tests"],
                    language=info["language"],
                    prefix=info["prefix"],
                    reference=row["answer"],
                ),
                cfg.task,
            )
