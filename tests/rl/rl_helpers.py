"""Helpers of the rl/ tests: how many HumanEval problems they use, and a scripted solver that
answers each with its canonical or broken program (the fixtures are in conftest.py)."""

from __future__ import annotations

from typing import Any

from sandboxes_rl.fake_llm import code_agent_script
from sandboxes_rl.problems import question_of

__all__ = ["N_HUMANEVAL", "solver_for"]

N_HUMANEVAL = 20


def solver_for(problems: list[Any], broken: set[str] = frozenset()) -> Any:
    """`solution_for(prompt)`: the canonical program, or the broken one for ids in `broken`."""
    table = {question_of(p): (p.broken() if p.problem_id in broken else p.reference()) for p in problems}
    return table.get


__all__ += ["code_agent_script"]
