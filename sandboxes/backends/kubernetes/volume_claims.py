"""Volumes on kubernetes: a PersistentVolumeClaim each (the cluster's storage, provisioned by its
storage class), named `sandboxes-<volume id>`, sized by the volume's `size_bytes`, with the
access mode of `KubeConfig.volume_access_mode` (ReadWriteMany by default: sandboxes on different
nodes share one). Its record (name, owner, size) is the pool's (`sandboxes.state.volumes`); a pod of a
sandbox that mounts it gets the claim as a volume (`manifests.py`). The cluster keeps a claim's
storage while pods use it, so a delete is deferred as on a host. Bounds: the storage class's (a
claim has no inode bound of its own)."""

from __future__ import annotations

from typing import Any

from .config import LABEL_POOL, KubeConfig

__all__ = ["CLAIM_PREFIX", "claim_manifest"]

CLAIM_PREFIX = "sandboxes-"
LABEL_VOLUME = "sandboxes.io/volume"


def claim_manifest(cfg: KubeConfig, volume: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "accessModes": [cfg.volume_access_mode],
        "resources": {"requests": {"storage": str(volume.size_bytes)}},
    }
    if cfg.volume_storage_class is not None:
        spec["storageClassName"] = cfg.volume_storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": volume.claim,
            "namespace": cfg.namespace,
            "labels": {**cfg.labels, LABEL_POOL: cfg.pool, LABEL_VOLUME: volume.id},
        },
        "spec": spec,
    }
