"""Who calls an HTTP surface that takes the server's bearer keys (SandboxFusion, Piston), and
what such a surface of one-shot runs holds (`OneShotSurface`)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, ClassVar

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from sandboxes.server.auth import ANONYMOUS, ApiKeys
from sandboxes.server.http.endpoint import Envelope
from sandboxes.server.http.surface import Surface

if TYPE_CHECKING:
    from sandboxes.sandbox import SandboxBase
    from sandboxes.server.surface_core import SurfaceCore

__all__ = ["OneShotSurface", "caller"]


def caller(auth: ApiKeys, insecure: bool, request: Request) -> str:
    """The owner of the key `request` bears (`Authorization: Bearer ...`); ANONYMOUS where the
    surface is open (`insecure`, or a server without keys). Raises the auth error otherwise."""
    if insecure or not auth.enabled:
        return ANONYMOUS
    return auth.authenticate_header(request.headers.get("authorization"))


class OneShotSurface(Surface):
    """A surface whose every request runs in a fresh sandbox of `core` (`ServerCore.one_shot`,
    of `template`; None: the default), open to all when `insecure`. A subclass names its
    `envelope` and its `routes()`."""

    envelope: ClassVar[Envelope]

    def __init__(
        self,
        core: SurfaceCore,
        auth: ApiKeys,
        *,
        insecure: bool = False,
        template: str | None = None,
        max_batch_concurrency: int = 64,
    ) -> None:
        self.core = core
        self.auth = auth
        self.insecure = insecure
        self.template = template
        self.max_batch_concurrency = max_batch_concurrency

    def owner(self, request: Request) -> str:
        return caller(self.auth, self.insecure, request)

    def route(self, path: str, fn: Callable[[Request, str], Awaitable[Response]], method: str) -> Route:
        """`fn(request, owner)` at `path` in this surface's envelope."""
        endpoint = self.envelope.keyed(fn, owner=self.owner, draining=lambda: self.core.draining)
        return Route(path, endpoint, methods=[method])

    @contextlib.asynccontextmanager
    async def sandbox(
        self, owner: str, method: str, files: dict[str, Any] | None = None
    ) -> AsyncIterator[SandboxBase]:
        """A fresh sandbox for one run of `owner`'s, holding one exec slot while it runs."""
        async with self.core.one_shot(owner, self.template, files=files, method=method) as sb:
            yield sb
