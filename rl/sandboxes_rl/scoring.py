"""Code rewards: extract the program from a completion, build its test cases, judge it in a sandbox.

Shared by every adapter. Test specs come in the shapes trainers' data sets use:

- HumanEval: `{"test": "def check(candidate): ...", "entry_point": "f"}` (a check script);
- open-r1 `verification_info`: `{"language": "python", "test_cases": [{"input", "output", "type"}]}`;
- APPS / PRIME / veRL code sets: `{"inputs": [...], "outputs": [...]}` (stdin/stdout), or with
  `"fn_name"` (call-based: inputs are argument lists);
- a list of `{"input", "output"}` / `{"check"}` items, `sandboxes.TestCase` objects, or any of these
  as a JSON string.

A program that fails is a verdict (reward 0 for that case); an infrastructure failure raises a
`sandboxes.SandboxError` -- never a reward of 0.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sandboxes import InvalidRequest, SandboxBase, TestCase, TestReport, languages

__all__ = [
    "REWARD_MODES",
    "Score",
    "completion_text",
    "extract_code",
    "judge",
    "score_of",
    "tests_from_spec",
]

REWARD_MODES = ("pass_rate", "all_passed")

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+#.-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)


def normalize_language(language: str | None) -> str | None:
    if language is None:
        return None
    return languages.canonical(language) or language.strip().lower()


def completion_text(completion: Any) -> str:
    """The text of a completion: a str, a chat message, or a list of messages (last assistant turn)."""
    if completion is None:
        return ""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Mapping):
        return _content_text(completion.get("content"))
    if isinstance(completion, Sequence):
        for msg in reversed(completion):
            role = msg.get("role") if isinstance(msg, Mapping) else getattr(msg, "role", None)
            if role in (None, "assistant"):
                content = msg.get("content") if isinstance(msg, Mapping) else getattr(msg, "content", None)
                text = _content_text(content)
                if text.strip():
                    return text
        return ""
    return _content_text(getattr(completion, "content", completion))


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        parts = []
        for p in content:
            if isinstance(p, Mapping):
                if p.get("type", "text") == "text" and isinstance(p.get("text"), str):
                    parts.append(p["text"])
            elif isinstance(getattr(p, "text", None), str):
                parts.append(p.text)
        return "".join(parts)
    return str(content)


def extract_code(text: str, language: str | None = None) -> str:
    """The program in a model's answer.

    The last fenced block (```lang ... ```) whose language matches `language`, else the last
    fenced block of any language, else an unterminated last fence (a truncated answer), else the
    whole text stripped. Returns "" when there is nothing.
    """
    if not text:
        return ""
    want = normalize_language(language)
    blocks = [(normalize_language(m.group(1)) or "", m.group(2)) for m in _FENCE.finditer(text)]
    if blocks:
        if want:
            matching = [code for lang, code in blocks if lang == want]
            if matching:
                return matching[-1].strip("\n")
        return blocks[-1][1].strip("\n")
    return text.strip()


# --- test specs ------------------------------------------------------------------------------


def _check_script_humaneval(test: str, entry_point: str) -> str:
    return f"{test}\ncheck({entry_point})\n"


_CALL_CHECK = """\
import json as _json
_args = _json.loads({args!r})
_expected = _json.loads({expected!r})
_fn = globals().get({fn!r})
if _fn is None and "Solution" in globals():
    _fn = getattr(globals()["Solution"](), {fn!r})
_got = _fn(*_args) if isinstance(_args, list) else _fn(_args)
if isinstance(_got, tuple):
    _got = list(_got)
assert _got == _expected or [_got] == _expected, f"got {{_got!r}}, expected {{_expected!r}}"
"""


def _call_case(fn_name: str, args: Any, expected: Any) -> TestCase:
    """A call-based case (APPS `fn_name`): call the function with `args`, compare with `expected`."""
    return TestCase(
        check=_CALL_CHECK.format(args=json.dumps(args), expected=json.dumps(expected), fn=fn_name)
    )


def _as_text(v: Any) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, list):  # some sets store stdin / stdout as a list of lines
        return "\n".join(str(x) for x in v) + "\n"
    return str(v)


def _case(item: Any) -> TestCase:
    if isinstance(item, TestCase):
        return item
    if not isinstance(item, Mapping):
        raise InvalidRequest(
            f"a test case must be a mapping or sandboxes.TestCase, got {type(item).__name__}"
        )
    if item.get("check") is not None:
        return TestCase(input=item.get("input") or "", check=item["check"])
    if item.get("test") is not None and item.get("entry_point"):
        return TestCase(check=_check_script_humaneval(item["test"], item["entry_point"]))
    kind = item.get("type", "stdin_stdout")
    if kind not in ("stdin_stdout", "stdio"):
        raise InvalidRequest(f"test case type {kind!r} is not supported (stdin_stdout or check scripts)")
    out = item.get("output", item.get("expected_output"))
    if out is None:
        raise InvalidRequest(f"test case without an expected output: keys {sorted(item)}")
    return TestCase(input=_as_text(item.get("input", "")), expected_output=_as_text(out))


def tests_from_spec(spec: Any, language: str | None = None) -> tuple[list[TestCase], str | None]:
    """(test cases, language or None) from a spec in any of the supported shapes (see module doc).

    Raises `InvalidRequest` for a spec it cannot read. `None` / empty gives no cases.
    """
    if spec is None:
        return [], normalize_language(language)
    if isinstance(spec, (bytes, bytearray)):
        spec = spec.decode("utf-8")
    if isinstance(spec, str):
        if not spec.strip():
            return [], normalize_language(language)
        try:
            spec = json.loads(spec)
        except json.JSONDecodeError as e:
            raise InvalidRequest(f"a test spec string must be JSON: {e}") from None
    lang = normalize_language(language)
    if isinstance(spec, TestCase):
        return [spec], lang
    if isinstance(spec, Mapping):
        spec_lang = (
            normalize_language(spec.get("language")) if isinstance(spec.get("language"), str) else None
        )
        lang = lang or spec_lang
        if "verification_info" in spec:
            return tests_from_spec(spec["verification_info"], lang)
        if "test_cases" in spec:
            return tests_from_spec(spec["test_cases"], lang)
        if "tests" in spec:
            return tests_from_spec(spec["tests"], lang)
        if "inputs" in spec and "outputs" in spec:
            inputs, outputs = spec["inputs"], spec["outputs"]
            if not isinstance(inputs, list) or not isinstance(outputs, list) or len(inputs) != len(outputs):
                raise InvalidRequest("'inputs' and 'outputs' must be lists of the same length")
            fn = spec.get("fn_name")
            if fn:
                return [_call_case(fn, a, e) for a, e in zip(inputs, outputs)], lang or "python"
            return [
                TestCase(input=_as_text(i), expected_output=_as_text(o)) for i, o in zip(inputs, outputs)
            ], lang
        return [_case(spec)], lang
    if isinstance(spec, Sequence):
        return [_case(item) for item in spec], lang
    raise InvalidRequest(f"cannot read tests from {type(spec).__name__}")


tests_from_spec.__test__ = False  # type: ignore[attr-defined]  (not a pytest test)


# --- judging ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Score:
    """The reward of one program and how it was obtained."""

    reward: float
    pass_rate: float
    all_passed: bool
    passed: int
    total: int
    verdict: str
    report: TestReport | None = None
    extras: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def no_code(cls, total: int) -> Score:
        """The model gave no program: a genuine 0 (its fault, not the sandbox's)."""
        return cls(0.0, 0.0, False, 0, total, "no_code")

    def as_dict(self) -> dict[str, Any]:
        return {
            "score": self.reward,
            "pass_rate": self.pass_rate,
            "all_passed": float(self.all_passed),
            "passed": self.passed,
            "total": self.total,
            "verdict": self.verdict,
            **self.extras,
        }


def reward_of(report: TestReport, mode: str) -> float:
    if mode == "pass_rate":
        return report.pass_rate
    if mode == "all_passed":
        return 1.0 if report.all_passed else 0.0
    raise InvalidRequest(f"reward mode must be one of {REWARD_MODES}, got {mode!r}")


async def judge(
    sb: SandboxBase,
    code: str,
    tests: Sequence[TestCase],
    *,
    language: str = "python",
    reward: str = "pass_rate",
    time_limit: float | None = None,
    memory_limit_mb: float | None = None,
    compare: str = "whitespace",
) -> Score:
    """Judge `code` on `tests` in `sb`. Raises `sandboxes.SandboxError` on infrastructure failure."""
    if reward not in REWARD_MODES:
        raise InvalidRequest(f"reward mode must be one of {REWARD_MODES}, got {reward!r}")
    if not tests:
        raise InvalidRequest("no test cases to judge against")
    if not code.strip():
        return Score.no_code(len(tests))
    report = await sb.run_tests(
        code,
        list(tests),
        language=language,
        time_limit=time_limit,
        memory_limit_mb=memory_limit_mb,
        compare=compare,
    )
    return score_of(report, reward)


def score_of(report: TestReport, reward: str) -> Score:
    """The `Score` of a report, its reward per `reward` mode."""
    return Score(
        reward=reward_of(report, reward),
        pass_rate=report.pass_rate,
        all_passed=report.all_passed,
        passed=report.passed,
        total=report.total,
        verdict=report.verdict.value,
        report=report,
    )
