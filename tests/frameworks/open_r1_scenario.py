"""open-r1's code reward (`src/open_r1/rewards.py`, unmodified, from the archive in
../shared/frameworks) against a real `sandboxes serve`, run by tests/test_frameworks.py in the
open-r1 client venv:

    python open_r1_scenario.py SRC ROUTER    (SRC: the archive's src/ directory; ROUTER: the
                                              `host:port` its routed provider posts to)

`code_reward` with `e2b_router_url`, the provider open-r1 routes its rewards through: its indented
script template runs once per completion behind `/execute_batch`, here or in open-r1's own router.
Only `open_r1.utils`' package `__init__` is not run: it loads the training stack (torch, trl), which
the reward path never uses; its modules are the archive's. Prints one JSON object.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import sys
import types

from bare import load


def load_rewards(src: str) -> types.ModuleType:
    import_utils = load(src, "open_r1.utils.import_utils", "open_r1.utils")
    utils = sys.modules["open_r1.utils"]
    utils.is_e2b_available = import_utils.is_e2b_available  # type: ignore[attr-defined]
    utils.is_morph_available = import_utils.is_morph_available  # type: ignore[attr-defined]
    return importlib.import_module("open_r1.rewards")


DOUBLE = "```python\nprint(int(input()) * 2)\n```"
WRONG = "```python\nprint(int(input()) + 2)\n```"
CRASH = "```python\nraise SystemExit(1)\n```"


def main(src: str, router: str) -> None:
    rewards = load_rewards(src)
    cases = [{"input": "2", "output": "4"}, {"input": "5", "output": "10"}, {"input": "1", "output": "2"}]
    info = {"language": "python", "test_cases": cases}
    completions = [[{"role": "assistant", "content": c}] for c in (DOUBLE, WRONG, CRASH)]
    reward = functools.partial(rewards.code_reward, e2b_router_url=router)
    out = {"rewards": reward(completions, verification_info=[info] * 3)}
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
    os._exit(0)
