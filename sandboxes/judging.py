"""Judging programs against test cases: the request and result types of `Sandbox.run_tests`.

```python
report = await sb.run_tests(
    "print(sum(map(int, input().split())))",
    [sandboxes.TestCase("1 2\\n", "3\\n"), sandboxes.TestCase("5 5", "10")],
    language="python", time_limit=2, memory_limit_mb=256,
)
report.passed, report.total, report.cases[0].verdict   # 2, 2, Verdict.ACCEPTED
```

The agent compiles the program once and runs each case as its own isolated execution; every case
gets one `Verdict`. A program that fails is a verdict, never an exception: exceptions mean the
request was wrong (`InvalidRequest`) or the infrastructure failed.
"""

from __future__ import annotations

import enum
import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import InvalidRequest
from .types import Limits

__all__ = [
    "COMPARE_MODES",
    "CaseResult",
    "RunTestsRequest",
    "TestCase",
    "TestReport",
    "Verdict",
    "build_run_tests_request",
]

COMPARE_MODES = ("exact", "whitespace", "float")
# Most cases one call may carry (the agent refuses more).
MAX_CASES = 10_000
# Per-case wall limit the agent applies when neither the call nor the template sets one.
AGENT_DEFAULT_WALL_S = 30.0
# The agent bounds a compile step at 30 s; the RPC deadline leaves room for it plus file set-up.
COMPILE_MARGIN_S = 40.0
# Per-case slack of the RPC deadline on top of its wall limit (spawn, teardown, comparison).
CASE_MARGIN_S = 1.0
DEADLINE_MARGIN_S = 5.0


class Verdict(str, enum.Enum):
    """The outcome of one test case."""

    ACCEPTED = "accepted"
    WRONG_ANSWER = "wrong_answer"
    TIME_LIMIT = "time_limit"
    MEMORY_LIMIT = "memory_limit"
    RUNTIME_ERROR = "runtime_error"
    COMPILE_ERROR = "compile_error"
    OUTPUT_LIMIT = "output_limit"
    SANDBOX_ERROR = "sandbox_error"
    SKIPPED = "skipped"  # not run: an earlier case failed and stop_on_first_failure was set

    def __str__(self) -> str:
        return self.value


def _to_bytes(value: Any, what: str) -> bytes:
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise InvalidRequest(f"{what} must be str or bytes, got {type(value).__name__}")


@dataclass(frozen=True)
class TestCase:
    """One test case: stdin/stdout style (`expected_output`) or check-script style (`check`).

    Exactly one of `expected_output` and `check` is given. A check is code run after the program
    in the same interpreter and namespace (Python, Bash; HumanEval style): the case is accepted
    when it finishes without error. str values are UTF-8 encoded; `input` and `expected_output`
    are stored as bytes, `check` as str.
    """

    __test__ = False  # not a pytest test class

    input: str | bytes = b""
    expected_output: str | bytes | None = None
    check: str | None = None

    def __post_init__(self) -> None:
        if (self.expected_output is None) == (self.check is None):
            raise InvalidRequest("a test case needs exactly one of expected_output and check")
        object.__setattr__(self, "input", _to_bytes(self.input, "test case input"))
        if self.expected_output is not None:
            object.__setattr__(
                self, "expected_output", _to_bytes(self.expected_output, "test case expected_output")
            )
        else:
            check = self.check
            if isinstance(check, (bytes, bytearray, memoryview)):
                try:
                    check = bytes(check).decode("utf-8")
                except UnicodeDecodeError as e:
                    raise InvalidRequest("test case check must be UTF-8 text") from e
            if not isinstance(check, str):
                raise InvalidRequest(f"test case check must be str, got {type(check).__name__}")
            if not check.strip():
                raise InvalidRequest("test case check is empty")
            object.__setattr__(self, "check", check)

    def to_wire(self) -> tuple[bytes, bytes, str]:
        """The (input, expected_output, check) triple the agent takes."""
        return (self.input, self.expected_output or b"", self.check or "")  # type: ignore[return-value]


@dataclass(frozen=True)
class CaseResult:
    """What one case did and its verdict. `stdout` / `stderr` are excerpts (first KiB)."""

    verdict: Verdict
    exit_code: int = 0  # -1 when killed by a signal
    signal: int = 0
    duration_s: float = 0.0
    cpu_time_s: float = 0.0
    peak_memory_bytes: int = 0
    stdout: bytes = b""
    stderr: bytes = b""
    message: str = ""  # why, in a few words (e.g. the first differing token)
    path: str = "spawn"  # "spawn" | "zygote"

    @property
    def accepted(self) -> bool:
        return self.verdict is Verdict.ACCEPTED


@dataclass(frozen=True)
class TestReport:
    """The verdicts of one program on all its cases, with its compile step."""

    __test__ = False  # not a pytest test class

    cases: tuple[CaseResult, ...]
    passed: int
    total: int
    compiled: bool = True  # False: every case is COMPILE_ERROR
    compile_output: bytes = b""  # excerpt of the compiler's diagnostics
    compile_time_s: float = 0.0
    duration_s: float = 0.0

    @property
    def pass_rate(self) -> float:
        """Accepted cases over all cases (0.0 for an empty report)."""
        return self.passed / self.total if self.total else 0.0

    @property
    def all_passed(self) -> bool:
        return self.total > 0 and self.passed == self.total

    @property
    def verdict(self) -> Verdict:
        """ACCEPTED when every case passed, else the verdict of the first failing case."""
        for c in self.cases:
            if c.verdict is not Verdict.ACCEPTED:
                return c.verdict
        return Verdict.ACCEPTED if self.all_passed else Verdict.SANDBOX_ERROR

    def verdict_counts(self) -> dict[str, int]:
        """How many cases got each verdict."""
        return dict(Counter(c.verdict.value for c in self.cases))


@dataclass(frozen=True)
class RunTestsRequest:
    """A validated `run_tests` request, as the sandbox implementations receive it."""

    language: str
    source: str
    tests: tuple[tuple[bytes, bytes, str], ...]
    limits: Limits
    stop_on_first_failure: bool
    compare: str
    float_tolerance: float  # 0: the agent's default (1e-6)
    deadline_s: float  # RPC deadline: a generous bound, the agent enforces the real limits


def _positive(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidRequest(f"{what} must be a number, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise InvalidRequest(f"{what} must be finite and > 0, got {value!r}")
    return float(value)


def _source(program: Any) -> str:
    if isinstance(program, (bytes, bytearray, memoryview)):
        try:
            program = bytes(program).decode("utf-8")
        except UnicodeDecodeError as e:
            raise InvalidRequest("program must be UTF-8 text") from e
    if not isinstance(program, str):
        raise InvalidRequest(f"program must be str, got {type(program).__name__}")
    if not program.strip():
        raise InvalidRequest("program is empty")
    return program


def _cases(tests: Any) -> tuple[tuple[bytes, bytes, str], ...]:
    if isinstance(tests, (str, bytes, TestCase, Mapping)) or not isinstance(tests, Iterable):
        raise InvalidRequest("tests must be a list of sandboxes.TestCase")
    tests = list(tests)
    if not tests:
        raise InvalidRequest("no test cases")
    if len(tests) > MAX_CASES:
        raise InvalidRequest(f"{len(tests)} test cases (max {MAX_CASES})")
    for t in tests:
        if not isinstance(t, TestCase):
            raise InvalidRequest(f"tests must be sandboxes.TestCase, got {type(t).__name__}")
    return tuple(t.to_wire() for t in tests)


def build_run_tests_request(
    program: Any,
    tests: Any,
    *,
    language: str,
    base_limits: Limits,
    time_limit: float | None,
    memory_limit_mb: float | None,
    stop_on_first_failure: bool,
    compare: str,
    float_tolerance: float | None,
    limits: Limits | None,
) -> RunTestsRequest:
    """Validate the arguments of `SandboxBase.run_tests` into a `RunTestsRequest`.

    Limits: `base_limits` (the sandbox's defaults), then `limits`, then `time_limit` (sets the
    wall and CPU limits of each case) and `memory_limit_mb`. Language-specific rules (which
    languages exist, which take check scripts) are the agent's: it refuses with `InvalidRequest`.
    """
    if not isinstance(language, str) or not language.strip():
        raise InvalidRequest(f"language must be a non-empty str, got {language!r}")
    source = _source(program)
    cases = _cases(tests)
    if limits is not None and not isinstance(limits, Limits):
        raise InvalidRequest(f"limits must be sandboxes.Limits, got {type(limits).__name__}")
    eff = base_limits.merged(limits)
    changes: dict[str, Any] = {}
    if time_limit is not None:
        t = _positive(time_limit, "time_limit")
        changes.update(wall_time_s=t, cpu_time_s=t)
    if memory_limit_mb is not None:
        changes["memory_bytes"] = int(_positive(memory_limit_mb, "memory_limit_mb") * (1 << 20))
    if changes:
        eff = eff.merged(Limits(**changes))
    eff.validate()
    if compare not in COMPARE_MODES:
        raise InvalidRequest(f"compare must be one of {', '.join(COMPARE_MODES)}, got {compare!r}")
    tolerance = 0.0
    if float_tolerance is not None:
        if isinstance(float_tolerance, bool) or not isinstance(float_tolerance, (int, float)):
            raise InvalidRequest(f"float_tolerance must be a number, got {float_tolerance!r}")
        if not math.isfinite(float_tolerance) or float_tolerance < 0:
            raise InvalidRequest(f"float_tolerance must be finite and >= 0, got {float_tolerance!r}")
        tolerance = float(float_tolerance)
    if not isinstance(stop_on_first_failure, bool):
        raise InvalidRequest(f"stop_on_first_failure must be a bool, got {stop_on_first_failure!r}")
    per_case = (eff.wall_time_s or AGENT_DEFAULT_WALL_S) * 1.1 + CASE_MARGIN_S
    deadline = COMPILE_MARGIN_S + len(cases) * per_case + DEADLINE_MARGIN_S
    return RunTestsRequest(
        language=language.strip(),
        source=source,
        tests=cases,
        limits=eff,
        stop_on_first_failure=stop_on_first_failure,
        compare=compare,
        float_tolerance=tolerance,
        deadline_s=deadline,
    )
