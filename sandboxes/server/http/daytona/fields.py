"""How the Daytona API reads the fields its requests share (the image a create or a snapshot names,
whole numbers given as JSON or in a path), refusing bad ones with the platform's 400."""

from __future__ import annotations

from typing import Any

from sandboxes.server.http.daytona.dockerfile import declared
from sandboxes.server.http.endpoint import Refused

__all__ = ["image_of", "int_of"]


def image_of(body: dict[str, Any]) -> str | None:
    """The image or snapshot a create names (None: the default); of a declarative image, the
    image its Dockerfile starts `FROM` (its other steps are `dockerfile.py`'s)."""
    build = body.get("buildInfo")
    if build is not None:
        return declared(build).image
    snapshot = body.get("snapshot")
    if snapshot is not None and (not isinstance(snapshot, str) or not snapshot):
        raise Refused(400, "snapshot must be a name")
    return snapshot or None


def int_of(value: Any, name: str, low: int = 0) -> int:
    if value is None:
        return 0
    try:
        n = int(value) if isinstance(value, str) else value
    except ValueError:
        raise Refused(400, f"{name} must be an integer") from None
    if isinstance(n, bool) or not isinstance(n, int) or n < low:
        raise Refused(400, f"{name} must be an integer of at least {low}")
    return n
