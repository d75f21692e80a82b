"""A checkpoint's layer (a directory in an overlay's lower-layer form, `sandboxes.state.checkpoints`) as
an OCI image layer: a gzipped tar in which overlay whiteouts are `.wh.<name>` entries and opaque
directories hold a `.wh..wh..opq`, as a registry and a container runtime expect them (the OCI image
spec's "whiteouts"). Written by the native `sandbox-layer` crate (`_native.pack_layer`), the one
place that knows both forms.

Only what a layer can hold is written: directories, regular files, symlinks and whiteouts, with
the ids and modes the programs gave them (set-id bits dropped), entries in a fixed order, with the
layer's own modification times, in a gzip stream without a name or a time, so that one layer is
one tar and one blob.

`relocate` moves the contents of some directories elsewhere in the tar (the directory itself
stays, empty): the kubernetes backend's places that the agent mounts a disk of its own at
(`backends/kubernetes/layered.py`). `under` puts the whole layer below a directory: a layered
volume's layers there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .._bridge import api

__all__ = ["LayerBlob", "write_layer"]


@dataclass(frozen=True)
class LayerBlob:
    """A layer written as a blob: where, its digest (of the gzipped bytes, what a registry names
    it by), its `diff_id` (of the tar, what an image's config lists) and its size."""

    path: Path
    digest: str
    diff_id: str
    size: int


def write_layer(
    layer: Path, dest: Path, relocate: Mapping[str, str] | None = None, under: str = ""
) -> LayerBlob:
    """Writes `layer` as a gzipped OCI layer tar at `dest` (blocking); the contents of each
    directory `relocate` names (a path relative to the layer's top) go under its target; with
    `under` (a relative path), the whole layer goes below it, its top as that directory."""
    digest, diff_id, size = api().pack_layer(str(layer), str(dest), dict(relocate or {}), under)
    return LayerBlob(dest, digest, diff_id, size)
