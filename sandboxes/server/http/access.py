"""Who calls an HTTP surface that takes the server's bearer keys (SandboxFusion, Piston)."""

from __future__ import annotations

from typing import Any

from sandboxes.server.auth import ANONYMOUS, ApiKeys

__all__ = ["caller"]


def caller(auth: ApiKeys, insecure: bool, request: Any) -> str:
    """The owner of the key `request` bears (`Authorization: Bearer ...`); ANONYMOUS where the
    surface is open (`insecure`, or a server without keys). Raises the auth error otherwise."""
    if insecure or not auth.enabled:
        return ANONYMOUS
    return auth.authenticate_header(request.headers.get("authorization"))
