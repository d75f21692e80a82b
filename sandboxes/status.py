"""The one place where `sandboxes.errors` meet gRPC status codes, in both directions.

The server turns an exception into a status code plus trailing metadata naming its exact kind
(`sandboxes-error-kind`); the client turns the status back into the exact exception class. A status
without that metadata (raised by gRPC itself: a dead connection, an oversized message, a deadline)
is mapped from its code alone.

Both sides import it (the client never imports the server's modules); it imports only grpc and
sandboxes.errors.
"""

from __future__ import annotations

import grpc

from sandboxes import errors as E

__all__ = [
    "KIND_KEY",
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


class Unauthenticated(E.AuthError):
    """No API key, or a wrong one (UNAUTHENTICATED); a plain AuthError is PERMISSION_DENIED."""


_CODE_OF_KIND: dict[E.ErrorKind, grpc.StatusCode] = {
    E.ErrorKind.INVALID_REQUEST: grpc.StatusCode.INVALID_ARGUMENT,
    E.ErrorKind.TOO_LARGE: grpc.StatusCode.RESOURCE_EXHAUSTED,
    E.ErrorKind.NO_SPACE: grpc.StatusCode.RESOURCE_EXHAUSTED,
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

_CLASS_OF_KIND: dict[str, type[E.SandboxError]] = {
    E.ErrorKind.INVALID_REQUEST.value: E.InvalidRequest,
    E.ErrorKind.TOO_LARGE.value: E.TooLarge,
    E.ErrorKind.NO_SPACE.value: E.NoSpace,
    E.ErrorKind.NOT_FOUND.value: E.NotFound,
    E.ErrorKind.AUTH.value: E.AuthError,
    E.ErrorKind.QUOTA.value: E.QuotaExceeded,
    E.ErrorKind.POOL_EXHAUSTED.value: E.PoolExhausted,
    E.ErrorKind.SANDBOX_LOST.value: E.SandboxLost,
    E.ErrorKind.TIMEOUT.value: E.SandboxTimeout,
    E.ErrorKind.LAUNCH.value: E.LaunchError,
    E.ErrorKind.BACKEND_UNAVAILABLE.value: E.BackendUnavailable,
    E.ErrorKind.CANCELLED.value: E.Cancelled,
    E.ErrorKind.DRAINING.value: E.Draining,
    E.ErrorKind.INTERNAL.value: E.SandboxError,
}

# Statuses raised by gRPC itself (no kind in the trailers).
_CLASS_OF_CODE: dict[grpc.StatusCode, type[E.SandboxError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: E.InvalidRequest,
    grpc.StatusCode.OUT_OF_RANGE: E.InvalidRequest,
    grpc.StatusCode.FAILED_PRECONDITION: E.InvalidRequest,
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


def _kind_of(exc: BaseException) -> E.ErrorKind:
    if isinstance(exc, E.SandboxError):
        return exc.kind
    return E.ErrorKind.INTERNAL


def status_of(exc: BaseException) -> grpc.StatusCode:
    """The status code a server answers for `exc`."""
    if isinstance(exc, Unauthenticated):
        return grpc.StatusCode.UNAUTHENTICATED
    return _CODE_OF_KIND.get(_kind_of(exc), grpc.StatusCode.INTERNAL)


def _ascii(value: str) -> str:
    # Non-binary metadata values must be printable ASCII.
    return "".join(c if " " <= c <= "~" else "?" for c in value)[:1024]


def trailing_metadata_of(exc: BaseException) -> tuple[tuple[str, str], ...]:
    """Trailing metadata naming the exact kind (and the launch step) of `exc`."""
    md: list[tuple[str, str]] = [(KIND_KEY, _kind_of(exc).value)]
    step = getattr(exc, "step", "")
    if step:
        md.append((STEP_KEY, _ascii(str(step))))
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
    cls = _CLASS_OF_KIND.get(kind) if kind else None
    if cls is None:
        cls = _CLASS_OF_CODE.get(code, E.SandboxError)
        if code == grpc.StatusCode.RESOURCE_EXHAUSTED and "message" in details.lower():
            # gRPC's own "received message larger than max": the request is wrong, not a quota.
            cls = E.InvalidRequest
    detail = f"grpc status {code.name}"
    if cls is E.LaunchError:
        return E.LaunchError(details, detail=detail, step=_metadata_value(trailing_metadata, STEP_KEY) or "")
    return cls(details, detail=detail)


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
