"""Request fields the compatible APIs share, read the one way: string maps (env vars, labels,
metadata) and volume mounts, each refused with the caller's API's 400 (`Refused`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sandboxes import errors as E
from sandboxes.server.http.endpoint import Refused

if TYPE_CHECKING:
    from sandboxes.server.surface_core import SurfaceCore

__all__ = ["str_map", "volume_mounts"]


def str_map(value: Any, name: str) -> dict[str, str]:
    """`value` as a map of strings to strings (None: empty)."""
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise Refused(400, f"{name} must map strings to strings")
    return dict(value)


def volume_mounts(
    core: SurfaceCore, owner: str, value: Any, *, volume: str, path: str, what: str
) -> dict[str, tuple[str, bool]] | None:
    """A list of `{<volume>: id or name, <path>: mount path}` as the core's mounts (path ->
    (volume, read-only)), each of `owner`'s volumes (404 otherwise); None when there are none."""
    if not value:
        return None
    if not isinstance(value, list) or not all(
        isinstance(m, dict) and isinstance(m.get(volume), str) and isinstance(m.get(path), str) for m in value
    ):
        raise Refused(400, f"{what} must be a list of {{{volume}, {path}}}")
    mounts = {m[path]: (m[volume], False) for m in value}
    if len(mounts) != len(value):
        raise Refused(400, "two volumes are mounted at one path")
    for ref, _ in mounts.values():
        try:
            core.volume_of(owner, ref)
        except E.NotFound:
            raise Refused(404, f"volume {ref!r} not found") from None
    return mounts
