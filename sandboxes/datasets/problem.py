"""`Problem`: one programming problem with its test cases and reference solutions."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..judging import TestCase

__all__ = ["BROKEN_PROGRAMS", "DatasetError", "Problem", "read_jsonl"]

# A program per language that runs fine and prints nothing: never accepted by a problem whose
# expected outputs are non-empty (the bundled ones are, by construction).
BROKEN_PROGRAMS: dict[str, str] = {
    "python": "pass\n",
    "c": "int main(void) { return 0; }\n",
    "cpp": "int main() { return 0; }\n",
    "bash": "true\n",
    "java": "public class Main { public static void main(String[] args) {} }\n",
    "javascript": "// prints nothing\n",
    "typescript": "const unused: number = 0;\n",
    "go": "package main\n\nfunc main() {}\n",
    "rust": "fn main() {}\n",
}


class DatasetError(Exception):
    """A data set is missing (package not installed) or a file is malformed."""


@dataclass(frozen=True)
class Problem:
    """A problem: its statement, test cases and known solutions.

    `references` maps a language to a correct program (may be empty for user files).
    `broken_program` is a deliberately wrong solution in `language` (HumanEval: the prompt with
    `return None` as body); `broken(lang)` falls back to a do-nothing program of `lang`.
    """

    problem_id: str
    prompt: str
    tests: tuple[TestCase, ...]
    language: str = "python"
    references: Mapping[str, str] = field(default_factory=dict)
    entry_point: str | None = None
    broken_program: str | None = None

    def reference(self, language: str | None = None) -> str:
        """The reference solution in `language` (default: the problem's language)."""
        lang = language or self.language
        try:
            return self.references[lang]
        except KeyError:
            have = ", ".join(sorted(self.references)) or "none"
            raise DatasetError(f"{self.problem_id}: no {lang} reference (have: {have})") from None

    def broken(self, language: str | None = None) -> str:
        """A program in `language` that must not be accepted."""
        lang = language or self.language
        if self.broken_program is not None and lang == self.language:
            return self.broken_program
        try:
            return BROKEN_PROGRAMS[lang]
        except KeyError:
            raise DatasetError(f"no broken program for language {lang!r}") from None


def read_jsonl(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) of each non-blank line of a .jsonl or .jsonl.gz file."""
    p = Path(path)
    try:
        with open(p, "rb") as raw:
            gz = raw.read(2) == b"\x1f\x8b"
        f = gzip.open(p, "rt", encoding="utf-8") if gz else open(p, encoding="utf-8")  # noqa: SIM115
    except OSError as e:
        raise DatasetError(f"cannot read {p}: {e.strerror or e}") from e
    with f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise DatasetError(f"{p}:{n}: not valid JSON: {e}") from e
            if not isinstance(obj, dict):
                raise DatasetError(f"{p}:{n}: expected a JSON object")
            yield n, obj
