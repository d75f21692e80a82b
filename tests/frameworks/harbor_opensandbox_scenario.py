"""Harbor 0.25's OpenSandbox environment (`harbor.environments.opensandbox`, unmodified, from its
wheel, on the opensandbox SDK it installs) run by Harbor's own trial runner, as
`harbor run --env opensandbox --ek protocol=http --agent oracle|nop` runs it, against a real
`sandboxes serve`; run by tests/test_frameworks.py in the harbor client venv (Python 3.12):

    python harbor_opensandbox_scenario.py TASK_DIR TRIALS_DIR   (OPENSANDBOX_DOMAIN, OPENSANDBOX_API_KEY)

TRL's `HarborBashEnv` makes its environment from the type alone, so Harbor's OpenSandbox
environment keeps its default `protocol` (https) for the sandbox's execd: it reaches only a
server behind TLS. A plain-http server is reached the way Harbor's users reach one, with the
environment's `protocol` argument (`--ek protocol=http`), which only Harbor's own runner passes.

Per trial: the sandbox from the task's prebuilt image, the environment's files uploaded to its
work dir, log directories made and opened as root (`uid` 0), the agent's commands (the oracle
runs the task's solution; nop runs nothing), the task's tests uploaded and run, the reward read
back (`search` and `read_bytes`), the sandbox killed. Prints one JSON object.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from harbor.models.trial.config import AgentConfig, EnvironmentConfig, TaskConfig, TrialConfig
from harbor.trial.trial import Trial


async def trial(task_dir: str, trials_dir: str, agent: str) -> dict:
    config = TrialConfig(
        task=TaskConfig(path=Path(task_dir)),
        trials_dir=Path(trials_dir),
        agent=AgentConfig(name=agent),
        environment=EnvironmentConfig(type="opensandbox", kwargs={"protocol": "http"}),
    )
    result = await (await Trial.create(config)).run()
    error = result.exception_info
    rewards = result.verifier_result.rewards if result.verifier_result else None
    return {"reward": (rewards or {}).get("reward"), "error": error.exception_message if error else None}


async def main(task_dir: str, trials_dir: str) -> None:
    out = {agent: await trial(task_dir, trials_dir, agent) for agent in ("oracle", "nop")}
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
    os._exit(0)
