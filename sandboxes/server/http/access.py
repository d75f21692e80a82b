"""Who calls an HTTP surface that takes the server's bearer keys (SandboxFusion, Piston), and
what such a surface of one-shot runs holds (`OneShotSurface`)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from sandboxes.server.auth import ANONYMOUS, ApiKeys
from sandboxes.server.quota import Quotas

__all__ = ["OneShotSurface", "caller"]


def caller(auth: ApiKeys, insecure: bool, request: Any) -> str:
    """The owner of the key `request` bears (`Authorization: Bearer ...`); ANONYMOUS where the
    surface is open (`insecure`, or a server without keys). Raises the auth error otherwise."""
    if insecure or not auth.enabled:
        return ANONYMOUS
    return auth.authenticate_header(request.headers.get("authorization"))


class OneShotSurface:
    """A surface whose every request runs in a fresh sandbox claimed from `pool` (of `template`,
    None: the default), under the caller's quotas, open to all when `insecure`."""

    def __init__(
        self,
        pool: Any,
        auth: ApiKeys,
        *,
        quotas: Quotas | None = None,
        insecure: bool = False,
        template: str | None = None,
        max_batch_concurrency: int = 64,
        draining: Callable[[], bool] = lambda: False,
    ) -> None:
        self.pool = pool
        self.auth = auth
        self.quotas = quotas or Quotas()
        self.insecure = insecure
        self.template = template
        self.max_batch_concurrency = max_batch_concurrency
        self.draining = draining

    def _owner(self, request: Any) -> str:
        return caller(self.auth, self.insecure, request)

    @contextlib.contextmanager
    def charged(self, owner: str) -> Iterator[None]:
        """One sandbox and one exec slot of `owner`'s quotas for the block (QuotaExceeded if none)."""
        self.quotas.acquire_sandbox(owner)
        try:
            with self.quotas.exec_slot(owner):
                yield
        finally:
            self.quotas.release_sandbox(owner)
