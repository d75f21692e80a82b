"""sandboxes: high-throughput code-execution sandboxes.

Embedded: `async with sandboxes.Pool(warm=8) as pool: async with pool.sandbox() as sb: ...`.
Remote: `async with sandboxes.AsyncSandboxClient("host:50051", api_key=...) as client: ...`.
Both hand out objects with the `Sandbox` interface. Errors live in `sandboxes.errors`.
"""

from __future__ import annotations

from typing import Any

from . import errors
from .egress import EgressPolicy
from .errors import (
    AuthError,
    BackendUnavailable,
    Cancelled,
    InvalidRequest,
    LaunchError,
    NoSpace,
    NotFound,
    PoolExhausted,
    QuotaExceeded,
    SandboxError,
    SandboxLimitExceeded,
    SandboxLost,
    SandboxTimeout,
    Step,
    TooLarge,
)
from .grading import GradeStream, Grading
from .judging import CaseResult, TestCase, TestReport, Verdict
from .pool import Pool
from .sandbox import ExecStream, Sandbox, SandboxBase
from .state.checkpoints import Checkpoint
from .templates import Template
from .types import AgentInfo, DirEntry, ExecEvent, ExecResult, Limits

__all__ = [
    "AgentInfo",
    "AsyncSandboxClient",
    "AuthError",
    "BackendUnavailable",
    "Cancelled",
    "CaseResult",
    "Checkpoint",
    "DirEntry",
    "EgressPolicy",
    "ExecEvent",
    "ExecResult",
    "ExecStream",
    "GradeStream",
    "Grading",
    "InvalidRequest",
    "LaunchError",
    "Limits",
    "NoSpace",
    "NotFound",
    "Pool",
    "PoolExhausted",
    "QuotaExceeded",
    "Sandbox",
    "SandboxBase",
    "SandboxError",
    "SandboxLimitExceeded",
    "SandboxLost",
    "SandboxTimeout",
    "Step",
    "Template",
    "TestCase",
    "TestReport",
    "TooLarge",
    "Verdict",
    "errors",
]


def __getattr__(name: str) -> Any:
    # The remote client pulls in grpc; import it only when asked for.
    if name == "AsyncSandboxClient":
        from .client import AsyncSandboxClient

        return AsyncSandboxClient
    raise AttributeError(f"module 'sandboxes' has no attribute {name!r}")
