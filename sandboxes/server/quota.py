"""Per-API-key concurrency quotas: live sandboxes and in-flight executions.

A sandbox counts from the moment its create is accepted (so concurrent creates cannot overshoot)
until it is deleted; an exec counts while it runs. Passing a limit is RESOURCE_EXHAUSTED
(`QuotaExceeded`), which the caller may retry once it freed something.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

from sandboxes.errors import QuotaExceeded

__all__ = ["QuotaLimits", "Quotas"]


@dataclass(frozen=True)
class QuotaLimits:
    """`None` means unlimited."""

    max_sandboxes: int | None = None
    max_execs: int | None = None
    max_checkpoints: int | None = None
    max_checkpoint_bytes: int | None = None
    max_volumes: int | None = None
    max_volume_bytes: int | None = None  # the sum of the volumes' sizes (each one's bound)


class Quotas:
    """Counters of one server. Single-threaded: used from the event loop only."""

    def __init__(self, limits: QuotaLimits = QuotaLimits(), per_key: dict[str, QuotaLimits] | None = None):
        self.default = limits
        self.per_key = dict(per_key or {})
        self._sandboxes: Counter[str] = Counter()
        self._execs: Counter[str] = Counter()

    def limits_of(self, owner: str) -> QuotaLimits:
        return self.per_key.get(owner, self.default)

    # -- sandboxes -------------------------------------------------------------------------

    def acquire_sandbox(self, owner: str) -> None:
        limit = self.limits_of(owner).max_sandboxes
        if limit is not None and self._sandboxes[owner] >= limit:
            raise QuotaExceeded(
                f"sandbox quota of this API key is used up: {self._sandboxes[owner]} of {limit} "
                "sandboxes live; delete one first"
            )
        self._sandboxes[owner] += 1

    def release_sandbox(self, owner: str) -> None:
        if self._sandboxes[owner] > 0:
            self._sandboxes[owner] -= 1
        if self._sandboxes[owner] == 0:
            del self._sandboxes[owner]

    def sandboxes(self, owner: str) -> int:
        return self._sandboxes[owner]

    # -- checkpoints -----------------------------------------------------------------------

    def check_checkpoints(self, owner: str, count: int, size: int) -> int | None:
        """Refuses one more checkpoint of `owner`, who has `count` of `size` bytes; else the bytes
        the next may take (None: unbounded), the bound of its capture."""
        limits = self.limits_of(owner)
        if limits.max_checkpoints is not None and count >= limits.max_checkpoints:
            raise QuotaExceeded(
                f"checkpoint quota of this API key is used up: {count} of {limits.max_checkpoints} "
                "checkpoints kept; delete one first"
            )
        if limits.max_checkpoint_bytes is not None and size >= limits.max_checkpoint_bytes:
            raise QuotaExceeded(
                f"checkpoint quota of this API key is used up: {size} of {limits.max_checkpoint_bytes} "
                "bytes of checkpoints kept; delete one first"
            )
        return None if limits.max_checkpoint_bytes is None else limits.max_checkpoint_bytes - size

    # -- volumes ---------------------------------------------------------------------------

    def check_volumes(self, owner: str, count: int, size: int, more: int) -> None:
        """Refuses one more volume of `more` bytes to `owner`, who has `count` of `size` bytes."""
        limits = self.limits_of(owner)
        if limits.max_volumes is not None and count >= limits.max_volumes:
            raise QuotaExceeded(
                f"volume quota of this API key is used up: {count} of {limits.max_volumes} volumes; "
                "delete one first"
            )
        if limits.max_volume_bytes is not None and size + more > limits.max_volume_bytes:
            raise QuotaExceeded(
                f"volume quota of this API key is used up: {size} of {limits.max_volume_bytes} bytes "
                f"of volumes, {more} more asked; delete one first"
            )

    # -- execs -----------------------------------------------------------------------------

    @contextlib.contextmanager
    def exec_slot(self, owner: str) -> Iterator[None]:
        limit = self.limits_of(owner).max_execs
        if limit is not None and self._execs[owner] >= limit:
            raise QuotaExceeded(
                f"exec quota of this API key is used up: {self._execs[owner]} of {limit} executions in flight"
            )
        self._execs[owner] += 1
        try:
            yield
        finally:
            self._execs[owner] -= 1
            if self._execs[owner] <= 0:
                del self._execs[owner]

    def execs(self, owner: str) -> int:
        return self._execs[owner]
