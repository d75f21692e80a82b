"""The HTTP status of each of the server's errors, for every compatible surface: one table, each
surface wrapping it in its own error body."""

from __future__ import annotations

from sandboxes import errors as E

__all__ = ["http_status"]

# Most specific first (TooLarge is an InvalidRequest).
_STATUSES: tuple[tuple[type[E.SandboxError], int], ...] = (
    (E.TooLarge, 413),
    (E.NotFound, 404),
    (E.Conflict, 409),
    (E.QuotaExceeded, 429),
    (E.SandboxLimitExceeded, 429),
    (E.NoSpace, 507),
    (E.AuthError, 403),
    (E.PoolExhausted, 503),
    (E.Cancelled, 503),
    (E.SandboxLost, 502),
)


def http_status(e: E.SandboxError, *, invalid: int = 400, other: int = 500) -> int:
    """The status of `e`: the table's, `invalid` for another bad request (400, or 422 where the
    platform answers that), `other` for a failure of the server's own."""
    for cls, status in _STATUSES:
        if isinstance(e, cls):
            return status
    return invalid if isinstance(e, E.InvalidRequest) else other
