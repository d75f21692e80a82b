"""Problem sets as trainer rows: a question for the model, tests as a JSON spec, references.

`problem_rows("humaneval")` / `problem_rows("stdio")` turn `sandboxes.datasets` problems into plain
dicts every adapter reads:

    {"question": str, "answer": reference program, "info": {"problem_id", "language",
     "tests": JSON spec (see sandboxes_rl.scoring.tests_from_spec), "prefix": str}}

`prefix` holds the import lines of a HumanEval prompt: a model that answers with just the function
still gets `from typing import List` (`program_of` prepends it).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from sandboxes import TestCase

__all__ = ["problem_rows", "program_of", "question_of", "tests_spec"]


def tests_spec(tests: Iterable[TestCase]) -> list[dict[str, str]]:
    """A JSON-serialisable spec of `TestCase`s (`tests_from_spec` reads it back)."""
    out = []
    for t in tests:
        if t.check is not None:
            item = {"check": t.check}
            if t.input:
                item["input"] = bytes(t.input).decode("utf-8")
            out.append(item)
        else:
            out.append(
                {
                    "input": bytes(t.input).decode("utf-8"),
                    "output": bytes(t.expected_output or b"").decode("utf-8"),
                }
            )
    return out


tests_spec.__test__ = False  # type: ignore[attr-defined]  (not a pytest test)


def _imports(prompt: str) -> str:
    lines = [ln for ln in prompt.splitlines() if ln.startswith(("import ", "from "))]
    return "\n".join(lines) + ("\n" if lines else "")


def question_of(problem: Any) -> str:
    """The user message for a problem (HumanEval: complete a function; else: a stdin/stdout program)."""
    lang = problem.language
    if problem.entry_point:
        return (
            f"Complete the following {lang} function.\n\n```{lang}\n{problem.prompt.rstrip()}\n```\n\n"
            f"You may run code with the tools first. Answer with the complete function "
            f"`{problem.entry_point}` in a ```{lang} code block."
        )
    return (
        f"{problem.prompt.rstrip()}\n\nWrite a complete {lang} program that reads standard input and "
        f"writes standard output. You may run code with the tools first. Answer with the program in a "
        f"```{lang} code block."
    )


def problem_rows(
    name: str = "humaneval",
    *,
    num_examples: int = -1,
    problem_ids: Sequence[str] | None = None,
) -> list[dict[str, Any]]:
    """Rows of a bundled problem set ("humaneval" or "stdio")."""
    from sandboxes.datasets import load_humaneval, load_stdio

    loaders = {"humaneval": load_humaneval, "stdio": load_stdio}
    if name not in loaders:
        raise ValueError(f"unknown problem set {name!r} (have {sorted(loaders)})")
    problems = loaders[name]()
    if problem_ids is not None:
        wanted = set(problem_ids)
        problems = [p for p in problems if p.problem_id in wanted]
    if num_examples > 0:
        problems = problems[:num_examples]
    rows = []
    for p in problems:
        rows.append(
            {
                "question": question_of(p),
                "answer": p.references.get(p.language, ""),
                "info": {
                    "problem_id": p.problem_id,
                    "language": p.language,
                    "tests": json.dumps(tests_spec(p.tests)),
                    "prefix": _imports(p.prompt) if p.entry_point else "",
                },
            }
        )
    return rows


def program_of(code: str, prefix: str = "") -> str:
    """The program to judge: the model's code after the problem's import lines (if any)."""
    if not code.strip() or not prefix:
        return code
    return prefix + code
