"""veRL's SandboxFusion code reward (`verl/utils/reward_score/sandbox_fusion`, unmodified, from its
wheel) against a real `sandboxes serve`, run by tests/test_frameworks.py in the verl client venv:

    python verl_scenario.py URL    (URL: the server's /run_code, which veRL calls without a key)

`compute_score` as veRL's reward manager calls it per response: standard-input cases and
call-based (`fn_name`) cases, right and wrong, and a program that does not compile. veRL's package
`__init__`s (torch, ray) are not run: `bare.py`. Prints one JSON object.
"""

from __future__ import annotations

import json
import os
import sys
import threading

from bare import installed, load

ROOT = installed("verl")  # found, not imported: its package __init__ loads its training stack


def main(url: str) -> None:
    sf = load(ROOT, "verl.utils.reward_score.sandbox_fusion", "verl", "verl.utils", "verl.utils.reward_score")
    gate = threading.Semaphore(4)
    stdin_cases = {"inputs": ["2\n", "7\n"], "outputs": ["4\n", "14\n"]}
    call_cases = {"fn_name": "add", "inputs": ["1\n2", "5\n5"], "outputs": ["3", "10"]}
    out = {}
    for name, completion, cases in (
        ("stdin_solved", "```python\nprint(int(input()) * 2)\n```", stdin_cases),
        ("stdin_half", "```python\nn = int(input())\nprint(4 if n == 2 else 0)\n```", stdin_cases),
        ("call_solved", "```python\ndef add(a, b):\n    return a + b\n```", call_cases),
        ("broken", "```python\ndef f(:\n```", stdin_cases),
    ):
        score, meta = sf.compute_score(url, gate, 1024, completion, json.dumps(cases))
        out[name] = {"score": score, "statuses": [m.get("status") for m in meta]}
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
    os._exit(0)
