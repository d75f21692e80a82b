"""The one place where `sandboxes.errors` meet gRPC status codes, in both directions.

The server turns an exception into a status code plus trailing metadata naming its exact kind
(`sandboxes-error-kind`, an `ErrorKind` value), the step that failed (`sandboxes-error-step`, a
`Step` value) and the sandbox limit that refused the call (`sandboxes-error-limit`); the client
turns the status back into the exact exception class, with its step and limit. A status without
that metadata (raised by gRPC itself: a dead connection, an oversized message, a deadline) is
mapped from its code alone, by `CLASS_OF_CODE`: the one code-to-class table (the native client's
for an agent's statuses differs from it only where `AGENT_CODE_DIFFERS` says, and a test holds
it to that).

Both sides import it (the client never imports the server's modules); it imports only grpc and
sandboxes.errors.
"""

from __future__ import annotations

import grpc

from sandboxes import errors as E

__all__ = [
    "AGENT_CODE_DIFFERS",
    "CLASS_OF_CODE",
    "KIND_KEY",
    "LIMIT_KEY",
    "STEP_KEY",
    "Unauthenticated",
    "error_from_rpc",
    "error_from_status",
    "is_retryable_unavailable",
    "status_of",
    "trailing_metadata_of",
]

KIND_KEY = "sandboxes-error-kind"
STEP_KEY = "sandboxes-error-step"
LIMIT_KEY = "sandboxes-error-limit"


class Unauthenticated(E.AuthError):
    """No API key, or a wrong one (UNAUTHENTICATED); a plain AuthError is PERMISSION_DENIED."""


_CODE_OF_KIND: dict[E.ErrorKind, grpc.StatusCode] = {
    E.ErrorKind.INVALID_REQUEST: grpc.StatusCode.INVALID_ARGUMENT,
    E.ErrorKind.TOO_LARGE: grpc.StatusCode.RESOURCE_EXHAUSTED,
    E.ErrorKind.CONFLICT: grpc.StatusCode.ALREADY_EXISTS,
    E.ErrorKind.NO_SPACE: grpc.StatusCode.RESOURCE_EXHAUSTED,
    E.ErrorKind.SANDBOX_LIMIT: grpc.StatusCode.RESOURCE_EXHAUSTED,
    E.ErrorKind.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    E.ErrorKind.AUTH: grpc.StatusCode.PERMISSION_DENIED,
    E.ErrorKind.QUOTA: grpc.StatusCode.RESOURCE_EXHAUSTED,
    E.ErrorKind.POOL_EXHAUSTED: grpc.StatusCode.UNAVAILABLE,
    E.ErrorKind.SANDBOX_LOST: grpc.StatusCode.ABORTED,
    E.ErrorKind.TIMEOUT: grpc.StatusCode.DEADLINE_EXCEEDED,
    E.ErrorKind.LAUNCH: grpc.StatusCode.INTERNAL,
    E.ErrorKind.BACKEND_UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    E.ErrorKind.CANCELLED: grpc.StatusCode.CANCELLED,
    E.ErrorKind.DRAINING: grpc.StatusCode.UNAVAILABLE,
    E.ErrorKind.INTERNAL: grpc.StatusCode.INTERNAL,
}

# Statuses without a kind in their trailers (raised by gRPC itself). Codes not here (INTERNAL,
# UNKNOWN, DATA_LOSS) are `SandboxError` (internal).
CLASS_OF_CODE: dict[grpc.StatusCode, type[E.SandboxError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: E.InvalidRequest,
    grpc.StatusCode.OUT_OF_RANGE: E.InvalidRequest,
    grpc.StatusCode.FAILED_PRECONDITION: E.InvalidRequest,
    grpc.StatusCode.ALREADY_EXISTS: E.Conflict,
    grpc.StatusCode.NOT_FOUND: E.NotFound,
    grpc.StatusCode.UNAUTHENTICATED: E.AuthError,
    grpc.StatusCode.PERMISSION_DENIED: E.AuthError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: E.QuotaExceeded,
    grpc.StatusCode.UNAVAILABLE: E.BackendUnavailable,
    grpc.StatusCode.ABORTED: E.SandboxLost,
    grpc.StatusCode.DEADLINE_EXCEEDED: E.SandboxTimeout,
    grpc.StatusCode.CANCELLED: E.Cancelled,
    grpc.StatusCode.UNIMPLEMENTED: E.InvalidRequest,
}

# Where the native client's table for an agent's statuses (`_native.kind_of_status_code`) departs
# from `CLASS_OF_CODE`, on purpose: an agent is one sandbox, so a status that from the server
# means its backend or a caller's quota means the sandbox itself.
AGENT_CODE_DIFFERS: dict[grpc.StatusCode, E.ErrorKind] = {
    # The agent's connection broke (the transport's UNAVAILABLE, CANCELLED of a request caught on
    # a closing connection, UNKNOWN of a reset stream): the sandbox is lost, not the backend.
    grpc.StatusCode.UNAVAILABLE: E.ErrorKind.SANDBOX_LOST,
    grpc.StatusCode.CANCELLED: E.ErrorKind.SANDBOX_LOST,
    grpc.StatusCode.UNKNOWN: E.ErrorKind.SANDBOX_LOST,
    # An agent has no quotas: without a reason, RESOURCE_EXHAUSTED is a request over its bounds
    # (or over the transport's message size).
    grpc.StatusCode.RESOURCE_EXHAUSTED: E.ErrorKind.TOO_LARGE,
}


def _kind_of(exc: BaseException) -> E.ErrorKind:
    if isinstance(exc, E.SandboxError):
        return exc.kind
    return E.ErrorKind.INTERNAL


def status_of(exc: BaseException) -> grpc.StatusCode:
    """The status code a server answers for `exc`."""
    if isinstance(exc, Unauthenticated):
        return grpc.StatusCode.UNAUTHENTICATED
    if isinstance(exc, E.SandboxPaused | E.MemorySnapshotError):
        return grpc.StatusCode.FAILED_PRECONDITION
    return _CODE_OF_KIND.get(_kind_of(exc), grpc.StatusCode.INTERNAL)


def _ascii(value: str) -> str:
    # Non-binary metadata values must be printable ASCII.
    return "".join(c if " " <= c <= "~" else "?" for c in value)[:1024]


def trailing_metadata_of(exc: BaseException) -> tuple[tuple[str, str], ...]:
    """Trailing metadata naming the exact kind of `exc`, its step and its limit."""
    md: list[tuple[str, str]] = [(KIND_KEY, _kind_of(exc).value)]
    step = getattr(exc, "step", None)
    if isinstance(step, E.Step):
        md.append((STEP_KEY, step.value))
    limit = getattr(exc, "limit", "")
    if limit:
        md.append((LIMIT_KEY, _ascii(str(limit))))
    return tuple(md)


def _metadata_value(metadata, key: str) -> str | None:
    for item in metadata or ():
        k, v = item[0], item[1]
        if k == key:
            return v.decode("ascii", "replace") if isinstance(v, bytes) else v
    return None


def error_from_status(code: grpc.StatusCode, details: str | None, trailing_metadata=None) -> E.SandboxError:
    """Rebuild the exception a server raised from its status and trailers."""
    details = details or code.name.lower()
    kind = _metadata_value(trailing_metadata, KIND_KEY)
    if kind:
        cls = E.error_class(kind)
        if cls is E.InvalidRequest and code == grpc.StatusCode.FAILED_PRECONDITION:
            cls = E.SandboxPaused
    else:
        cls = CLASS_OF_CODE.get(code, E.SandboxError)
        if code == grpc.StatusCode.RESOURCE_EXHAUSTED and "message" in details.lower():
            # gRPC's own "received message larger than max": the request is wrong, not a quota.
            cls = E.InvalidRequest
    detail = f"grpc status {code.name}"
    step = E.Step.parse(_metadata_value(trailing_metadata, STEP_KEY))
    if cls is E.SandboxLimitExceeded:
        limit = _metadata_value(trailing_metadata, LIMIT_KEY) or ""
        return E.SandboxLimitExceeded(details, detail=detail, step=step, limit=limit)
    return cls(details, detail=detail, step=step)


def error_from_rpc(err: grpc.RpcError) -> E.SandboxError:
    """The `sandboxes.errors` exception of a failed call (grpc.aio.AioRpcError or grpc.RpcError)."""
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    details = err.details() if hasattr(err, "details") else str(err)
    trailers = err.trailing_metadata() if hasattr(err, "trailing_metadata") else None
    exc = error_from_status(code, details, trailers)
    exc.__cause__ = err
    return exc


def is_draining(err: grpc.RpcError) -> bool:
    """A draining server refused the call untouched: safe to send again, on a new connection."""
    if err.code() != grpc.StatusCode.UNAVAILABLE:
        return False
    return _metadata_value(err.trailing_metadata(), KIND_KEY) == E.ErrorKind.DRAINING.value


def is_retryable_unavailable(err: grpc.RpcError) -> bool:
    """A transport-level UNAVAILABLE (server unreachable, connection reset, backend down): safe to
    retry for idempotent calls. A pool that stayed exhausted for the whole claim wait is not retried:
    the server already waited."""
    if err.code() != grpc.StatusCode.UNAVAILABLE:
        return False
    kind = _metadata_value(err.trailing_metadata(), KIND_KEY)
    return kind in (None, E.ErrorKind.BACKEND_UNAVAILABLE.value)
