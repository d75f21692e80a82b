"""Timestamps as the compatible APIs write them: RFC 3339 in UTC with a `Z`."""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = ["iso"]


def iso(ts: float) -> str:
    """`ts` (unix seconds) as an RFC 3339 UTC timestamp."""
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")
