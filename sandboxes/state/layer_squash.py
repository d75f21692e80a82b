"""Layers in an overlay's lower-layer form (`sandboxes.state.checkpoints`) merged into one, as overlayfs
shows them stacked: what a long chain of a volume's versions is folded into, so that a volume
published many times stays one layer deep (an overlay takes a bounded number of lower layers).

The result is a bottom layer: nothing lies beneath it, so whiteouts delete what the layers below
them made and are then dropped, and an opaque directory replaces what was there. Regular files
are hard links to the layers' own (layers are immutable and on one file system: no byte is
copied, and a file outlives the layer it came from); directories and symlinks are made anew
with the topmost layer's modes and owners. Merged by the native `sandbox-layer` crate
(`_native.squash_layers`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from .._bridge import api

__all__ = ["squash"]


def squash(layers: Sequence[Path], dest: Path) -> None:
    """Merges `layers` (bottom first) into `dest`, an empty directory (blocking)."""
    api().squash_layers([str(p) for p in layers], str(dest))
