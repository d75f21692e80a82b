"""Typed errors of the sandboxes service.

A user program that fails, times out or runs out of memory is a *result* (`ExecResult`), never an
exception. An exception means the infrastructure failed or the request was wrong. RL code turns
`SandboxError` into "reschedule", never into a reward of 0.
"""

from __future__ import annotations

import enum

__all__ = [
    "AuthError",
    "BackendUnavailable",
    "Cancelled",
    "Draining",
    "ErrorKind",
    "InvalidRequest",
    "LaunchError",
    "NoSpace",
    "NotFound",
    "PoolExhausted",
    "QuotaExceeded",
    "SandboxError",
    "SandboxLost",
    "SandboxTimeout",
    "TooLarge",
]


class ErrorKind(str, enum.Enum):
    """Stable names of error kinds (also used as metric labels and gRPC status details)."""

    INVALID_REQUEST = "invalid_request"
    TOO_LARGE = "too_large"
    NO_SPACE = "no_space"
    NOT_FOUND = "not_found"
    AUTH = "auth"
    QUOTA = "quota"
    POOL_EXHAUSTED = "pool_exhausted"
    SANDBOX_LOST = "sandbox_lost"
    TIMEOUT = "timeout"
    LAUNCH = "launch"
    BACKEND_UNAVAILABLE = "backend_unavailable"
    CANCELLED = "cancelled"
    DRAINING = "draining"
    INTERNAL = "internal"


class SandboxError(Exception):
    """Base of every error the service raises. `retryable` tells RL code to reschedule."""

    kind: ErrorKind = ErrorKind.INTERNAL
    retryable: bool = True

    def __init__(self, message: str = "", *, detail: str = "") -> None:
        super().__init__(message or self.kind.value)
        self.message = message or self.kind.value
        self.detail = detail


class InvalidRequest(SandboxError, ValueError):
    """The request is malformed (bad argument, absurd limit, path outside the sandbox)."""

    kind = ErrorKind.INVALID_REQUEST
    retryable = False


class TooLarge(InvalidRequest):
    """A request or a file is over a bound: a read above its `max_bytes`, a write above the
    agent's per-call ceiling, a file above the file-size limit. Split it, or raise the bound."""

    kind = ErrorKind.TOO_LARGE


class NoSpace(SandboxError, OSError):
    """The sandbox's disk is full (its disk quota is reached). The sandbox keeps serving: remove
    files, or use a template with a larger disk. Not an infrastructure failure: not retryable."""

    kind = ErrorKind.NO_SPACE
    retryable = False


class NotFound(SandboxError, LookupError):
    """No such sandbox, template or file."""

    kind = ErrorKind.NOT_FOUND
    retryable = False


class AuthError(SandboxError, PermissionError):
    """Missing or wrong API key / agent token, or a path the sandbox may not touch."""

    kind = ErrorKind.AUTH
    retryable = False


class QuotaExceeded(SandboxError):
    """The caller's concurrency quota is used up."""

    kind = ErrorKind.QUOTA


class PoolExhausted(SandboxError):
    """No sandbox became free within the claim's wait."""

    kind = ErrorKind.POOL_EXHAUSTED


class SandboxLost(SandboxError):
    """The sandbox died or became unreachable (agent killed, pod evicted, container gone)."""

    kind = ErrorKind.SANDBOX_LOST


class SandboxTimeout(SandboxError, TimeoutError):
    """An infrastructure call passed its deadline (not a user program's time limit)."""

    kind = ErrorKind.TIMEOUT


class LaunchError(SandboxError):
    """A sandbox could not be started; `step` names the isolation step that failed."""

    kind = ErrorKind.LAUNCH

    def __init__(self, message: str = "", *, detail: str = "", step: str = "") -> None:
        super().__init__(message, detail=detail)
        self.step = step


class BackendUnavailable(SandboxError):
    """The backend (Docker engine, Kubernetes API) cannot be reached or refused the request."""

    kind = ErrorKind.BACKEND_UNAVAILABLE


class Cancelled(SandboxError):
    """The call was cancelled (e.g. the server is shutting down)."""

    kind = ErrorKind.CANCELLED


class Draining(SandboxError):
    """The server is shutting down and refused the call before doing anything of it: any call,
    even a non-idempotent one, is safe to send again (the client does, on a new connection, which
    a load balancer gives to another replica)."""

    kind = ErrorKind.DRAINING
