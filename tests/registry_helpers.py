"""A pool of a root template on the EMULATED cluster (`cluster_pool`), whose image is the small
one of a registry on loopback (`sandboxes_testing.registry`) that it pushes its checkpoints to,
for the tests of what the kubernetes backend keeps in a cluster's registry and storage."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from sandboxes_testing.registry import REGISTRY_BIN, loopback_registry, push_small_image

__all__ = ["REGISTRY_BIN", "cluster_pool"]


@contextlib.asynccontextmanager
async def cluster_pool(tmp_path: Path, name: str) -> AsyncIterator[Any]:
    """A pool of root template `name` (the small image of a registry on loopback) on the
    emulated cluster, which pushes its checkpoints there."""
    from sandboxes_testing.kube_emulator import emulated_cluster

    import sandboxes
    from sandboxes import Template
    from sandboxes.backends.kubernetes import KubeConfig, KubernetesBackend

    with loopback_registry() as host:
        image = push_small_image(host)
        async with emulated_cluster(user_namespaces=True) as (api, _kubelet, url):
            cfg = KubeConfig(
                api_url=url,
                identity="cp-test",
                port_from_annotation=True,
                image=image,
                registry_url=f"http://{host}",
            )
            root = Template(name=name, user="root", backend="kubernetes")
            pool = sandboxes.Pool(
                backend=KubernetesBackend(cfg),
                warm=0,
                templates={name: root},
                claim_timeout=120.0,
                checkpoint_dir=tmp_path / "checkpoints",
                volume_dir=tmp_path / "volumes",
            )
            await pool.start()
            pool.test_image, pool.test_api = image, api
            try:
                yield pool
            finally:
                await pool.close()
