"""Per-sandbox access tokens of the compatible APIs (Prime's gateway tokens, E2B's access tokens):
kept as sha256 digests, compared in constant time."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable

__all__ = ["digest", "matches"]


def digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "replace")).digest()


def matches(known: Iterable[bytes], token: str) -> bool:
    """Whether `token` is one of the `known` digests (every one compared, in constant time)."""
    d, ok = digest(token), False
    for k in known:
        ok |= hmac.compare_digest(k, d)
    return ok
