"""tinker-cookbook's code grading (`recipes/code_rl/code_grading.py`, unmodified, from its wheel)
against a real `sandboxes serve`, run by tests/test_frameworks.py in the tinker client venv:

    python tinker_scenario.py    (SANDBOX_URL set to the server's /run_code)

`sandbox_check_correctness` as its LiveCodeBench environment calls it for a rollout's reward: its
test runner (LiveCodeBench's, which imports numpy) with the tests and the generation as files of a
one-shot `/run_code`; standard-input and call-based problems, solved and not. Prints one JSON
object.
"""

from __future__ import annotations

import asyncio
import json
import os

from tinker_cookbook.recipes.code_rl.code_grading import extract_code_from_model, sandbox_check_correctness

STDIN = [
    {"input": "2\n", "output": "4\n", "testtype": "stdin"},
    {"input": "21\n", "output": "42\n", "testtype": "stdin"},
]
CALL = [
    {"input": "[1, 2, 3]", "output": "6", "testtype": "functional", "metadata": {"func_name": "total"}},
    {"input": "[]", "output": "0", "testtype": "functional", "metadata": {"func_name": "total"}},
]
SOLVED = "```python\nimport numpy as np\nprint(int(np.int64(input()) * 2))\n```"
WRONG = "```python\nprint(int(input()) + 2)\n```"
CALLED = "```python\nclass Solution:\n    def total(self, xs):\n        return sum(xs)\n```"
CALLED_WRONG = "```python\nclass Solution:\n    def total(self, xs):\n        return len(xs)\n```"


async def main() -> None:
    out: dict = {}
    for name, sample, response in (
        ("stdin_solved", STDIN, SOLVED),
        ("stdin_wrong", STDIN, WRONG),
        ("call_solved", CALL, CALLED),
        ("call_wrong", CALL, CALLED_WRONG),
    ):
        code = extract_code_from_model(response)
        ok, details = await sandbox_check_correctness(sample, code, timeout=6)
        out[name] = {"passed": ok, "status": details.get("status"), "error": details.get("error")}
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
    os._exit(0)
