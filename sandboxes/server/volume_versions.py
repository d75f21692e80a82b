"""Volumes kept as versions: a key's named directory whose content is a chain of checkpoint layers,
its newest version (the head). The Prime API's volumes are these (`http/prime/volumes.py`).

A sandbox attaches a volume at a path when it is created: it sees the head of that moment, as a
layered volume (`Template.layered_volumes`) whose writes are private to it and bounded like its
work dir, and never a later version. Publishing makes its writes one layer on the version it
attached, and that version plus the layer the new head: a sandbox created afterwards sees it. A
publish by a sandbox whose volume moved on since (another sandbox published) is refused
(`Conflict`) unless forced; two publishes of one volume never run at once. A read-only
attachment cannot write nor publish.

A version is a checkpoint of the pool's store labelled with its volume (`VOLUME_LABEL`): it is
counted in its key's checkpoint quota, read by id like any checkpoint (the Prime SDK waits on the
id a publish answers), but never listed with the key's checkpoints nor restored as a sandbox. The
version a publish replaces is deleted; its layers stay while a sandbox attached to it runs (the
store's reference counts) or a newer version stacks on them. The records are JSON files under
`root`, re-read when a name is missing (the replicas of a cluster sharing the directory).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sandboxes import errors as E
from sandboxes.server.replicated import Codec
from sandboxes.state.json_records import read_records, write_record

__all__ = [
    "ATTACHMENTS_ATTR",
    "MAX_ATTACHMENTS",
    "VOLUME_LABEL",
    "Attachment",
    "VersionedVolume",
    "VolumeVersions",
    "attachments_codec",
]

VOLUME_LABEL = "sandboxes.volume"
# `Record.attrs` key of a sandbox's attachments (a list of `Attachment`).
ATTACHMENTS_ATTR = "volume_versions"
# The bytes of a version: its own layer's and those of the version it stacks on.
BYTES_LABEL = "sandboxes.volume.bytes"
MAX_ATTACHMENTS = 8
# A version's chain of layers is folded into one past this many (`CheckpointStore.squash`): an
# overlay takes a bounded number of lower layers, and a deep one is slower to look up in.
MAX_CHAIN = 16
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")


@dataclass
class VersionedVolume:
    id: str
    owner: str
    name: str
    created_at: float
    head: str | None = None  # the newest version's checkpoint id; None: never published
    bytes: int = 0  # of the head version


@dataclass
class Attachment:
    """One volume of one sandbox: at `path`, made of the version that was the head at its create
    (`layers`, bottom first; none: never published, empty). `seen` is the head its writes are on
    top of: that version, or the one its last publish made."""

    volume_id: str
    name: str
    path: str
    read_only: bool
    layers: tuple[str, ...]
    base_bytes: int
    seen: str | None

    def mount(self) -> tuple[str, bool, tuple[str, ...]]:
        """The layered volume of `Pool.claim(layered_volumes=...)`."""
        return (self.path, self.read_only, self.layers)


def attachments_codec() -> Codec:
    """How a record's attachments reach the other replicas of a cluster."""
    return Codec(
        lambda atts: [asdict(a) for a in atts],
        lambda data: [Attachment(**{**d, "layers": tuple(d["layers"])}) for d in data],
    )


class VolumeVersions:
    """The versioned volumes of one state directory, their versions in `pool`'s checkpoints."""

    def __init__(self, root: Path, pool: Any) -> None:
        self.root = Path(root)
        self.pool = pool
        self.checkpoints = pool.checkpoints
        self._records: dict[str, VersionedVolume] | None = None
        self._publishing: set[str] = set()

    # --- records ---------------------------------------------------------------------------------

    def _load(self, fresh: bool = False) -> dict[str, VersionedVolume]:
        if self._records is None or fresh:
            self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
            self._records = {v.id: v for v in read_records(self.root, lambda d: VersionedVolume(**d))}
        return self._records

    def _write(self, v: VersionedVolume) -> None:
        write_record(self.root, v.id, asdict(v))

    def _find(self, owner: str, name: str) -> VersionedVolume | None:
        for fresh in (False, True):
            for v in self._load(fresh).values():
                if v.owner == owner and v.name == name:
                    return v
        return None

    def create(self, owner: str, name: str) -> VersionedVolume:
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise E.InvalidRequest(
                "a volume's name is 1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit"
            )
        if self._find(owner, name) is not None:
            raise E.Conflict(f"a volume named {name!r} already exists")
        v = VersionedVolume(id=f"vol-{uuid.uuid4().hex[:16]}", owner=owner, name=name, created_at=time.time())
        self._load()[v.id] = v
        self._write(v)
        return v

    def get(self, owner: str, name: str) -> VersionedVolume:
        v = self._find(owner, name)
        if v is None:
            raise E.NotFound(f"Volume {name!r} not found")
        return v

    def list(self, owner: str) -> list[VersionedVolume]:
        return sorted(
            (v for v in self._load(fresh=True).values() if v.owner == owner),
            key=lambda v: (v.created_at, v.id),
        )

    def used_bytes(self, owner: str) -> int:
        """The bytes of `owner`'s volumes' heads together."""
        return sum(v.bytes for v in self.list(owner))

    async def delete(self, owner: str, name: str) -> VersionedVolume:
        """Deletes the volume and its head version (its layers go once no sandbox uses them)."""
        v = self.get(owner, name)
        self._load().pop(v.id, None)
        with contextlib.suppress(FileNotFoundError):
            (self.root / f"{v.id}.json").unlink()
        if v.head is not None:
            with contextlib.suppress(E.NotFound):
                await self.pool.delete_checkpoint(v.head, owner)
        return v

    # --- attachments and publishes ---------------------------------------------------------------

    def attach(self, owner: str, name: str, path: str, read_only: bool) -> Attachment:
        """`owner`'s volume `name` at `path` of a new sandbox, as its head is now."""
        v = self.get(owner, name)
        layers: tuple[str, ...] = ()
        if v.head is not None:
            layers = tuple(self.checkpoints.get(v.head, owner).layers)
        return Attachment(
            volume_id=v.id,
            name=v.name,
            path=path,
            read_only=read_only,
            layers=layers,
            base_bytes=v.bytes,
            seen=v.head,
        )

    async def publish(
        self,
        sb: Any,
        owner: str,
        att: Attachment,
        *,
        force: bool = False,
        labels: dict[str, str] | None = None,
        max_bytes: int | None = None,
    ) -> Any:
        """`sb`'s writes into its attachment `att` as the volume's new head (a checkpoint, which
        this returns; `att.seen` becomes it); past `max_bytes` of writes, `TooLarge`."""
        if att.read_only:
            raise E.InvalidRequest(f"volume {att.name!r} is attached read-only: it cannot be published")
        v = next((r for r in self._load(fresh=True).values() if r.id == att.volume_id), None)
        if v is None or v.owner != owner:
            raise E.NotFound(f"Volume {att.name!r} not found")
        if v.id in self._publishing:
            raise E.Conflict(f"another publish of volume {att.name!r} is in flight")
        if v.head != att.seen and not force:
            raise E.Conflict(
                f"volume {att.name!r} moved on since this sandbox attached it (head {v.head}); "
                "publish with force to replace it"
            )
        self._publishing.add(v.id)
        try:
            digest, size = await self.pool.capture_volume(sb, att.path, max_bytes)
            total = att.base_bytes + size
            layers = (*att.layers, digest)
            folded = len(layers) > MAX_CHAIN
            if folded:
                layers = (await asyncio.to_thread(self.checkpoints.squash, layers),)
            cp = self.checkpoints.add(
                template="",
                layers=layers,
                owner=owner,
                source=sb.id,
                size=size,
                ttl_s=None,
                labels={**(labels or {}), VOLUME_LABEL: v.id, BYTES_LABEL: str(total)},
            )
            if folded:
                self.checkpoints.collect([digest])  # folded into the merged layer: its own goes
            replaced, v.head, v.bytes = v.head, cp.id, total
            self._write(v)
            att.seen = cp.id
            # The replaced version's record goes; its layers stay while they are in use.
            if replaced is not None:
                with contextlib.suppress(E.NotFound):
                    await self.pool.delete_checkpoint(replaced, owner)
            return cp
        finally:
            self._publishing.discard(v.id)
