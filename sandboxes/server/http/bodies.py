"""Bounded reads of HTTP request bodies: a body is read into memory only up to its surface's limit,
so an oversized request is refused before it costs memory."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["BodyTooLarge", "read_body", "read_json"]


class BodyTooLarge(ValueError):
    """The body passed the limit of its endpoint (HTTP 413 where the caller has that status)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the request body is larger than {limit} bytes")
        self.limit = limit


async def read_body(request: Any, limit: int) -> bytes:
    """The whole body of a Starlette `request`, refusing it once it passes `limit` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(limit)
        chunks.append(chunk)
    return b"".join(chunks)


async def read_json(request: Any, limit: int) -> Any:
    """The body parsed as JSON (`ValueError` if it is not JSON, `BodyTooLarge` past `limit`)."""
    data = await read_body(request, limit)
    try:
        return json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"the body is not valid JSON: {e}") from None
