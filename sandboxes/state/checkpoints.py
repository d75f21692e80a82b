"""Checkpoints: a sandbox's file system frozen into immutable layers, and sandboxes made from them.

A checkpoint is a record (`Checkpoint`) naming its template and a chain of layers, bottom first.
A layer is what one sandbox changed (the agent's `Checkpoint` stream: every writable place as it
differs from what the sandbox was made from), unpacked once on this host and named by the
stream's sha256, so the same changes are one layer however often they are taken. A checkpoint of a
sandbox made from a checkpoint adds one layer to its chain: the cost of a checkpoint follows the
size of the changes, never of the image, and every sandbox made from a layer shares it (each
writable place an overlay with the layer beneath its own disk).

On disk (`root`, `$SANDBOXES_CHECKPOINT_DIR`, else `checkpoints` beside the image cache):
`layers/<sha256>/` the unpacked layers, `records/<id>.json` the checkpoints (written to a
temporary file and renamed), `memory/<id>/` the running programs' images of a checkpoint taken
with its memory (`backends/memory.py`; removed with its record, or after the restores reading
them), `tmp/` layers being unpacked and programs being dumped. Records and layers survive the process;
a layer is removed once no record names it and no sandbox of this process runs on it (a deleted
checkpoint's layers stay until the sandboxes made from it end). Checkpoints expire `ttl_s` after
they are taken unless kept (`ttl_s=None`). Each belongs to an owner (an API key's id; "" for an
embedded pool): another owner's is missing to a caller.
"""

from __future__ import annotations

import asyncio
import builtins
import collections
import contextlib
import hashlib
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..backends.images import cache_root
from ..errors import InvalidRequest, NotFound
from .json_records import read_records, write_record
from .layer_squash import squash

__all__ = ["CHECKPOINT_DIR_ENV", "DEFAULT_TTL_S", "Checkpoint", "CheckpointStore", "checkpoint_root"]

CHECKPOINT_DIR_ENV = "SANDBOXES_CHECKPOINT_DIR"
DEFAULT_TTL_S = 24 * 3600.0
MAX_TTL_S = 365 * 24 * 3600.0
# The agent's stream of 200 MB of changes takes ~1 s; this bounds a stuck one.
CAPTURE_TIMEOUT_S = 600.0
# Every capture is bounded while it runs (what it unpacks onto this host is a sandbox's to make):
# past either bound it stops with `TooLarge` naming it, and the sandbox serves on. Bytes are the
# stream's, in which a file's holes cost nothing.
MAX_CAPTURE_BYTES = 32 << 30
MAX_CAPTURE_ENTRIES = 1_000_000


def checkpoint_root() -> Path:
    """Where this host keeps checkpoints."""
    if env := os.environ.get(CHECKPOINT_DIR_ENV):
        return Path(env)
    return cache_root().parent / "checkpoints"


@dataclass(frozen=True)
class Checkpoint:
    """A sandbox's file system at one moment: `layers` (digests, bottom first) on `template`."""

    id: str
    template: str
    layers: tuple[str, ...]
    owner: str = ""
    name: str = ""
    source: str = ""  # the sandbox it was taken of
    bytes: int = 0  # of its own (top) layer's stream
    created_at: float = 0.0
    expires_at: float | None = None  # None: kept until deleted
    # What the surface that took it keeps with it (e.g. the image a Prime sandbox was asked for).
    labels: dict[str, str] = field(default_factory=dict)
    # Its sandbox's running programs too (`memory/<id>/`, counted in `bytes`): a sandbox made from
    # it runs them on.
    memory: bool = False

    def expired(self, now: float | None = None) -> bool:
        return self.expires_at is not None and (now or time.time()) >= self.expires_at

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["layers"] = list(self.layers)
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Checkpoint:
        return cls(**{**d, "layers": tuple(d["layers"])})


def _check_ttl(ttl_s: float | None) -> None:
    if ttl_s is None:
        return
    if isinstance(ttl_s, bool) or not isinstance(ttl_s, (int, float)) or not 0 < ttl_s <= MAX_TTL_S:
        raise InvalidRequest(f"ttl_s must be in (0, {MAX_TTL_S:.0f}] or None (kept), got {ttl_s!r}")


class CheckpointStore:
    """The checkpoints and layers of one host directory (see the module's doc)."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = Path(root or checkpoint_root())
        self.layers_dir = self.root / "layers"
        self.records_dir = self.root / "records"
        self.tmp_dir = self.root / "tmp"
        self.memory_dir = self.root / "memory"
        self._in_use: collections.Counter[str] = collections.Counter()
        self._memory_in_use: collections.Counter[str] = collections.Counter()
        self._records: dict[str, Checkpoint] | None = None
        self.max_capture_bytes = MAX_CAPTURE_BYTES
        self.max_capture_entries = MAX_CAPTURE_ENTRIES
        # Called with each checkpoint deleted or expired, before its layers are collected (the
        # pool stops keeping warm sandboxes of it).
        self.on_drop: list[Callable[[Checkpoint], object]] = []

    # --- records ---------------------------------------------------------------------------------

    def _load(self, fresh: bool = False) -> dict[str, Checkpoint]:
        """The records, read from the directory when first needed or `fresh` (other processes
        sharing the directory, the replicas of a cluster, add and delete records too)."""
        if self._records is None or fresh:
            for d in (self.layers_dir, self.records_dir, self.tmp_dir, self.memory_dir):
                d.mkdir(parents=True, exist_ok=True, mode=0o700)
            self._records = {cp.id: cp for cp in read_records(self.records_dir, Checkpoint.from_json)}
        return self._records

    def _write(self, cp: Checkpoint) -> None:
        write_record(self.records_dir, cp.id, cp.to_json())

    def add(
        self,
        *,
        template: str,
        layers: Iterable[str],
        owner: str = "",
        name: str = "",
        source: str = "",
        size: int = 0,
        ttl_s: float | None = DEFAULT_TTL_S,
        labels: dict[str, str] | None = None,
        memory: Path | None = None,
    ) -> Checkpoint:
        """Records a checkpoint of layers already stored; with `memory`, a directory of this
        store's `memory_tmp()` holding its programs' images (moved into the store; `size`
        counts them)."""
        _check_ttl(ttl_s)
        now = time.time()
        cp_id = f"cp-{uuid.uuid4().hex[:16]}"
        if memory is not None:
            os.rename(memory, self.memory_path(cp_id))
        cp = Checkpoint(
            id=cp_id,
            template=template,
            layers=tuple(layers),
            owner=owner,
            name=name,
            source=source,
            bytes=size,
            created_at=now,
            expires_at=None if ttl_s is None else now + ttl_s,
            labels=dict(labels or {}),
            memory=memory is not None,
        )
        self._load()[cp.id] = cp
        self._write(cp)
        return cp

    def get(self, checkpoint_id: str, owner: str | None = None) -> Checkpoint:
        """The checkpoint `checkpoint_id` of `owner` (None: any owner's); `NotFound` otherwise."""
        self.expire()
        cp = self._load().get(checkpoint_id) or self._load(fresh=True).get(checkpoint_id)
        if cp is None or (owner is not None and cp.owner != owner):
            raise NotFound(f"no checkpoint {checkpoint_id!r}")
        return cp

    def list(self, owner: str | None = None) -> builtins.list[Checkpoint]:
        """The live checkpoints of `owner` (None: everyone's), oldest first."""
        self._load(fresh=True)
        self.expire()
        return sorted(
            (cp for cp in self._load().values() if owner is None or cp.owner == owner),
            key=lambda cp: (cp.created_at, cp.id),
        )

    def delete(self, checkpoint_id: str, owner: str | None = None) -> Checkpoint:
        """Removes the record; its layers go once nothing else uses them."""
        cp = self.get(checkpoint_id, owner)
        self._drop(cp)
        return cp

    def _drop(self, cp: Checkpoint) -> None:
        self._load().pop(cp.id, None)
        with contextlib.suppress(FileNotFoundError):
            (self.records_dir / f"{cp.id}.json").unlink()
        for fn in self.on_drop:
            fn(cp)
        self.collect(cp.layers)
        self._collect_memory(cp.id)

    def expire(self) -> int:
        """Drops the checkpoints past their time; returns how many."""
        now = time.time()
        gone = [cp for cp in self._load().values() if cp.expired(now)]
        for cp in gone:
            self._drop(cp)
        return len(gone)

    def usage(self, owner: str) -> tuple[int, int]:
        """`owner`'s live checkpoints: how many, and the bytes of their own layers."""
        mine = self.list(owner)
        return len(mine), sum(cp.bytes for cp in mine)

    # --- memory: the programs' images of a checkpoint that has them -----------------------------

    def memory_path(self, checkpoint_id: str) -> Path:
        return self.memory_dir / checkpoint_id

    def memory_tmp(self) -> Path:
        """A fresh path (not made) in this store for a dump's images, before `add` takes them."""
        self._load()
        return self.tmp_dir / f"memory-{uuid.uuid4().hex[:16]}"

    @contextlib.contextmanager
    def using_memory(self, cp: Checkpoint) -> Iterator[Path]:
        """`cp`'s images, kept while the block restores from them (a deletion meanwhile removes
        them after it)."""
        path = self.memory_path(cp.id)
        if not cp.memory or not path.is_dir():
            raise NotFound(f"checkpoint {cp.id} has no memory on this host")
        self._memory_in_use[cp.id] += 1
        try:
            yield path
        finally:
            self._memory_in_use[cp.id] -= 1
            if self._memory_in_use[cp.id] <= 0:
                del self._memory_in_use[cp.id]
            self._collect_memory(cp.id)

    def _collect_memory(self, checkpoint_id: str) -> None:
        """Removes a checkpoint's images once no record names it and no restore reads them."""
        if checkpoint_id not in self._load() and not self._memory_in_use.get(checkpoint_id):
            shutil.rmtree(self.memory_path(checkpoint_id), ignore_errors=True)

    # --- layers ----------------------------------------------------------------------------------

    def layer_path(self, digest: str) -> Path:
        return self.layers_dir / digest

    async def capture(
        self, client: Any, volume: str = "", max_bytes: int | None = None
    ) -> tuple[str, int, int]:
        """Stores the changes of the sandbox `client` (a `_native.AgentClient`) reaches (with
        `volume`, those of its layered volume at that path) as a layer: `(digest, bytes it
        allocates, entries)`. The same changes are the same layer. Bounded by the store's
        `max_capture_bytes` and `max_capture_entries`, and by `max_bytes` when given (what an
        owner's quota leaves): past one it raises `TooLarge` and keeps nothing."""
        self._load()
        bound = (
            self.max_capture_bytes if max_bytes is None else min(self.max_capture_bytes, max(max_bytes, 1))
        )
        tmp = Path(tempfile.mkdtemp(dir=self.tmp_dir))
        try:
            digest, size, entries = await client.checkpoint(
                str(tmp), CAPTURE_TIMEOUT_S, volume, bound, self.max_capture_entries
            )
            dest = self.layer_path(digest)
            try:
                os.rename(tmp, dest)
            except OSError:
                if not dest.is_dir():
                    raise
                # Taken before: the layer is already here.
            return digest, size, entries
        finally:
            if tmp.exists():
                await asyncio.to_thread(shutil.rmtree, tmp, True)

    def squash(self, layers: Sequence[str]) -> str:
        """`layers` (bottom first, with nothing beneath them: a volume's versions) merged into one
        layer stored beside them (`layer_squash`, blocking): its name. The same layers are the
        same merged layer."""
        self._load()
        digest = "squash-" + hashlib.sha256("\0".join(layers).encode()).hexdigest()
        dest = self.layer_path(digest)
        if dest.is_dir():
            return digest
        tmp = Path(tempfile.mkdtemp(dir=self.tmp_dir))
        try:
            squash([self.layer_path(d) for d in layers], tmp)
            try:
                os.rename(tmp, dest)
            except OSError:
                if not dest.is_dir():
                    raise
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        return digest

    def acquire(self, layers: Iterable[str]) -> builtins.list[str]:
        """Marks `layers` in use by this process's sandboxes; returns their directories."""
        paths = []
        for d in layers:
            p = self.layer_path(d)
            if not p.is_dir():
                raise NotFound(f"layer {d} is not on this host")
            self._in_use[d] += 1
            paths.append(str(p))
        return paths

    def release(self, layers: Iterable[str]) -> None:
        layers = list(layers)
        for d in layers:
            self._in_use[d] -= 1
            if self._in_use[d] <= 0:
                del self._in_use[d]
        self.collect(layers)

    def collect(self, layers: Iterable[str]) -> None:
        """Removes those of `layers` no record names and no sandbox here uses."""
        wanted = set(layers)
        if not wanted:
            return  # nothing to read the records for (a pool that never checkpointed reads none)
        named = {d for cp in self._load().values() for d in cp.layers}
        for d in wanted:
            if d not in named and not self._in_use.get(d):
                shutil.rmtree(self.layer_path(d), ignore_errors=True)
