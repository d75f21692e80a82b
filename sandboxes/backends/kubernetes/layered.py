"""Images of checkpoints on kubernetes: a template's image with a checkpoint's layers on top,
pushed to the cluster's registry (`KubeConfig.registry_url`), so that a pod made from a
checkpoint (or a built template) is just a pod of that image, pulled by its node like any other.

A pod's agent mounts a disk of its own at /tmp and at the work dir (the pod's emptyDirs hide the
image's there too), so those places' part of each layer is moved under `PLACES` in the image
(merged there by the runtime like the rest, whiteouts applied), which the agent is given as a
layer beneath those places (`manifests.py`). A layered volume's layers (`Template.layered_volumes`:
a version of a volume) go below `VOLUME_LAYERS/<i>` (merged there by the runtime too: the agent
is given that directory as the volume's one layer).

The layers' bytes go from the agent that was checkpointed to the manager (its `Checkpoint`
stream, `sandboxes.state.checkpoints`), from the manager to the registry, and from the registry to the
node: never through the API server. An image is named by a digest of its base and its layers
(`<registry>/<base repository>:cp-<digest>`), pushed once per process; pushing it again (another
replica) writes the same manifest, and the base's own layers are never copied (same repository).
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import tempfile
from collections.abc import Sequence
from pathlib import Path

from ...state.layer_tar import LayerBlob, write_layer
from .oci_registry import Registry

__all__ = ["PLACES", "VOLUME_LAYERS", "LayeredImages"]

PLACES = "/.sandbox-places"
VOLUME_LAYERS = "/.sandbox-volumes"


class LayeredImages:
    """The checkpoint images one backend made (or found made) in the registry at `registry_url`."""

    def __init__(self, registry_url: str) -> None:
        self.registry = Registry(registry_url)
        self._made: dict[str, str] = {}
        self._locks: collections.defaultdict[str, asyncio.Lock] = collections.defaultdict(asyncio.Lock)

    async def image_for(
        self, image: str, layers: Sequence[str], work_dir: str, volumes: Sequence[Sequence[str]] = ()
    ) -> str:
        """`image` with the layer directories `layers` (bottom first) on top, and each of
        `volumes` (a layered volume's layer directories, bottom first) below `VOLUME_LAYERS/<i>`,
        in the registry; `work_dir` is the template's (one of the places)."""
        parts = [image, work_dir, *(Path(p).name for p in layers)]
        for i, vol in enumerate(volumes):
            parts += [f"volume {i}", *(Path(p).name for p in vol)]
        key = hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]
        async with self._locks[key]:
            if key not in self._made:
                self._made[key] = await asyncio.to_thread(
                    self._push, image, layers, work_dir, volumes, f"cp-{key}"
                )
        return self._made[key]

    def _push(
        self, image: str, layers: Sequence[str], work_dir: str, volumes: Sequence[Sequence[str]], tag: str
    ) -> str:
        places = PLACES.strip("/")
        relocate = {rel: f"{places}/{rel}" for rel in ("tmp", work_dir.strip("/"))}
        with tempfile.TemporaryDirectory(prefix="sandboxes-layers-") as d:
            blobs: list[LayerBlob] = [
                write_layer(Path(p), Path(d, f"{i}.tar.gz"), relocate) for i, p in enumerate(layers)
            ]
            for i, vol in enumerate(volumes):
                under = f"{VOLUME_LAYERS.strip('/')}/{i}"
                blobs += [
                    write_layer(Path(p), Path(d, f"v{i}-{k}.tar.gz"), under=under) for k, p in enumerate(vol)
                ]
            return self.registry.stack(image, blobs, tag, created_by="sandboxes checkpoint")
