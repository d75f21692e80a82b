"""sandboxes-rl: code rewards for RL trainers on `sandboxes`, with provisioning hidden behind the
first inference turn.

- `sandboxes_rl.overlap`: `SandboxLease` -- a rollout starts claiming its sandbox at once and waits
  only at first use; `sandbox_ready_wait_s` per rollout.
- `sandboxes_rl.scoring`: extract the program from a completion, read test specs, judge.
- `sandboxes_code` (a package of its own, in this distribution): the verifiers 0.4 (`verifiers.v1`)
  taskset `sandboxes-code`.
- `sandboxes_rl.trl`: `code_reward` and `SandboxCodeEnv` for TRL's GRPOTrainer.
- `sandboxes_rl.verl`: `compute_score` for veRL.
- `sandboxes_rl.fake_llm`: an OpenAI-compatible chat server stand-in for tests and benchmarks.

This module imports no trainer library.
"""

from __future__ import annotations

from .overlap import (
    ClientProvider,
    OverlapSummary,
    PoolProvider,
    SandboxLease,
    SandboxProvider,
    as_provider,
    summarize,
)
from .runtime import SandboxRuntime, configure, default_runtime
from .scoring import Score, completion_text, extract_code, judge, tests_from_spec

__version__ = "0.1.0"

__all__ = [
    "ClientProvider",
    "OverlapSummary",
    "PoolProvider",
    "SandboxLease",
    "SandboxProvider",
    "SandboxRuntime",
    "Score",
    "as_provider",
    "completion_text",
    "configure",
    "default_runtime",
    "extract_code",
    "judge",
    "summarize",
    "tests_from_spec",
]
