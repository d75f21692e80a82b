"""sandboxes-rl: code rewards for RL trainers on `sandboxes`, with provisioning hidden behind the
first inference turn.

- `sandboxes_rl.overlap`: `SandboxLease` -- a rollout starts claiming its sandbox at once and waits
  only at first use; `sandbox_ready_wait_s` per rollout.
- `sandboxes_rl.scoring`: extract the program from a completion, read test specs, judge.
- `sandboxes_rl.verifiers_env`: `load_environment(**args)` for verifiers (classic API, 0.3.x).
- `sandboxes_rl.prime_compat`: a client shaped like the `prime-sandboxes` SDK's, on our server.
- `sandboxes_rl.trl`: `code_reward` and `SandboxCodeEnv` for TRL's GRPOTrainer.
- `sandboxes_rl.verl`: `compute_score` for veRL.
- `sandboxes_rl.fake_llm`: an OpenAI-compatible chat server stand-in for tests and benchmarks.

This module imports no trainer library. `load_environment` is resolved lazily so that
`verifiers.load_environment("sandboxes-rl", ...)` (the Environments Hub convention: the module named
after the environment id exposes `load_environment`) works without importing verifiers here.
"""

from __future__ import annotations

from typing import Any

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
    "load_environment",
    "summarize",
    "tests_from_spec",
]


def __getattr__(name: str) -> Any:
    if name == "load_environment":
        from .verifiers_env import load_environment

        return load_environment
    raise AttributeError(f"module 'sandboxes_rl' has no attribute {name!r}")
