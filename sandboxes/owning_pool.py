"""What a `Sandbox` asks of the pool that made it (`OwningPool`; `Pool` is one): typed here, so that
`sandbox.py` needs no import of `pool.py`, which makes sandboxes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, TypeVar

from .egress import EgressPolicy
from .state.checkpoints import Checkpoint

__all__ = ["OwningPool"]

SandboxT = TypeVar("SandboxT")


class OwningPool(Protocol[SandboxT]):
    """The calls `Sandbox.checkpoint`, `fork`, `pause` and `resume` hand to its pool, and the
    backend's fence of its egress (`Sandbox.set_egress_policy`)."""

    async def checkpoint(
        self, sb: SandboxT, *, name: str = ..., ttl_s: float | None = ..., memory: bool = ...
    ) -> Checkpoint: ...

    async def fork(
        self,
        sb: SandboxT,
        n: int,
        *,
        env: Mapping[str, str] | None = ...,
        labels: Mapping[str, str] | None = ...,
        timeout: float | None = ...,
        memory: bool = ...,
    ) -> list[SandboxT]: ...

    async def pause(self, sb: SandboxT) -> bool: ...

    async def resume(self, sb: SandboxT) -> bool: ...

    async def fence_egress(self, sb: SandboxT, policy: EgressPolicy) -> None: ...
