"""State kept on disk beyond one sandbox: the layers sandboxes are made of, and the stores whose
records name them. The pool (`pool.py`, `derived_pools.py`) and the server use them; none of
them knows of a pool, a backend's sandboxes or a server.

- `checkpoints.py`: `Checkpoint` records and the host's `CheckpointStore` (layers by digest,
  records, TTLs, owners, layers in use)
- `layer_tar.py`: a layer as an OCI layer tar; `layer_squash.py`: layers merged into one
- `volumes.py`: `Volume` records and the host's `VolumeStore` (an ext4 image per volume);
  `volume_files.py`: the host's confined file operations on a volume
- `built_templates.py`: the templates built through the APIs (named, tagged builds of layers)
- `json_records.py`: the stores' records, each written whole
"""
