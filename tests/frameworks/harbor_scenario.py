"""TRL's Harbor environment (`trl.experimental.harbor.HarborBashEnv`, TRL 1.16, over Harbor 0.25's
Daytona and E2B environments, unmodified, from their wheels) against a real `sandboxes serve`, run
by tests/test_frameworks.py in the harbor client venv (Python 3.12):

    python harbor_scenario.py PROVIDER TASK_DIR    (daytona: DAYTONA_API_URL, DAYTONA_API_KEY;
                                                    e2b: E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY)

What GRPOTrainer does per rollout: `reset` starts the task's sandbox from its environment
(a Dockerfile: an E2B template or a Daytona declarative image is built from it), the `bash` tool
runs the model's commands, `reward` runs the task's verifier (tests/test.sh) in the sandbox. Two
rollouts: one that submits the right answer, one that does not. Prints one JSON object.
"""

from __future__ import annotations

import gc
import json
import os
import sys

from trl.experimental.harbor import HarborBashEnv


def main(provider: str, task_dir: str) -> None:
    out: dict = {"rollouts": []}
    env = HarborBashEnv(environment_type=provider)
    for answer in ("42", "41"):
        instruction = env.reset(task_dir=task_dir)
        seen = env.bash("cat /opt/data.txt /opt/setup.txt; pwd")
        env.bash(f"echo -n {answer} > /workdir/answer.txt")
        out["rollouts"].append(
            {"instruction": instruction.split("\n")[0], "seen": seen, "reward": env.reward}
        )
    del env  # its teardown deletes the last sandbox
    gc.collect()
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
    os._exit(0)
