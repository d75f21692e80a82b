"""Templates built on this server: named, versioned stacks of checkpoint layers.

A built template belongs to one key (`owner`). It has a name, an id, and builds; each build is
the steps of one request run in a sandbox of its base (`template_build.py`), and a ready build is
a kept checkpoint (`sandboxes.state.checkpoints`): its layers are the base's plus what the steps
changed, shared by every sandbox made from it. Tags name builds (`default` unless a request names
others); a new build that becomes ready takes its tags from the builds that had them, and a build
left with no tag is dropped (its layers stay while sandboxes made from it run).

A build remembers what its sandboxes start with beyond files: the work dir and user its steps
ended on, and a start command with the ready command that says it is up.

Files a build copies in are uploaded first, one archive per content digest, kept with the
template (`<root>/templates/<id>.files/<digest>`) until it is deleted. Records are
`<root>/templates/<id>.json`, written whole and renamed, so templates outlive the process as their
checkpoints do; a build that was running when the process ended is an error on load.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import hmac
import re
import secrets
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sandboxes.errors import InvalidRequest, NotFound, QuotaExceeded
from sandboxes.state.json_records import read_record, write_record

__all__ = ["DEFAULT_TAG", "Build", "BuiltTemplate", "BuiltTemplates", "split_ref"]

DEFAULT_TAG = "default"
MAX_TEMPLATES_PER_KEY = 64
MAX_LOG_ENTRIES = 10_000
# What one key's uploaded archives may hold on this server's disk, all its templates together
# (kept until their template is deleted).
MAX_UPLOAD_BYTES_PER_KEY = 8 << 30
# The archive entries one key's copy steps may be reading at once, all its builds together (each
# archive is bounded by itself too: `template_build.MAX_COPY_ENTRIES`).
MAX_UNPACK_ENTRIES_PER_KEY = 200_000
_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,127}")
_TAG = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_DIGEST = re.compile(r"[0-9a-f]{64}")


def split_ref(ref: str) -> tuple[str, str | None]:
    """`name[:tag]` (a `namespace/` prefix, the platform's team, dropped): (name, tag or None)."""
    if not isinstance(ref, str) or not ref or len(ref) > 300:
        raise InvalidRequest("a template name is a non-empty string")
    name, _, tag = ref.rsplit("/", 1)[-1].partition(":")
    return name, (tag or None)


def check_name(name: str) -> str:
    if not _NAME.fullmatch(name):
        raise InvalidRequest(
            f"template name {name!r} must be lowercase letters, digits, '.', '_' or '-' (at most 128)"
        )
    return name


def check_tag(tag: str) -> str:
    if not isinstance(tag, str) or not _TAG.fullmatch(tag):
        raise InvalidRequest(f"tag {tag!r} must be letters, digits, '.', '_' or '-' (at most 128)")
    return tag


@dataclass
class Build:
    """One build of a template: its state, its log, and (once ready) its checkpoint."""

    id: str
    template_id: str
    created_at: float
    status: str = "waiting"  # building, ready, error
    tags: list[str] = field(default_factory=list)  # what it is tagged with once ready
    digest: str = ""  # of its base and steps: the same digest is the same build
    checkpoint: str = ""
    work_dir: str = ""
    user: str = ""  # who runs its sandboxes' programs, as the surface names that user
    # The sandbox's user its programs run as when a call names none ("": the programs' own),
    # set by a `user` step naming another.
    run_as: str = ""
    start_cmd: str = ""
    ready_cmd: str = ""
    env: dict[str, str] = field(default_factory=dict)  # what its sandboxes start with (Dockerfile ENV)
    cached: bool = False
    finished_at: float = 0.0
    logs: list[dict[str, Any]] = field(default_factory=list)  # {timestamp, level, message, step}
    reason: dict[str, Any] | None = None  # {message, step}: why it failed

    def log(self, message: str, level: str = "info", step: str | None = None) -> None:
        if len(self.logs) >= MAX_LOG_ENTRIES:
            if len(self.logs) == MAX_LOG_ENTRIES:
                self.logs.append(_entry("log truncated: at most 10,000 entries are kept", "warn", step))
            return
        self.logs.append(_entry(message, level, step))

    def fail(self, message: str, step: str | None) -> None:
        self.log(message, "error", step)
        self.status, self.finished_at = "error", time.time()
        self.reason = {"message": message, "step": step}

    @property
    def done(self) -> bool:
        return self.status in ("ready", "error")


def _entry(message: str, level: str, step: str | None) -> dict[str, Any]:
    e: dict[str, Any] = {"timestamp": time.time(), "level": level, "message": message}
    if step is not None:
        e["step"] = step
    return e


@dataclass
class BuiltTemplate:
    """A named template of one key, its builds and the tags naming them."""

    id: str
    owner: str
    name: str
    created_at: float
    updated_at: float
    cpu_count: int = 0
    memory_mb: int = 0
    builds: dict[str, Build] = field(default_factory=dict)
    tag_map: dict[str, str] = field(default_factory=dict)  # tag -> build id
    tagged_at: dict[str, float] = field(default_factory=dict)
    spawn_count: int = 0
    last_spawned_at: float = 0.0

    def build_of(self, tag: str | None) -> Build | None:
        """The build `tag` names (None: the default tag)."""
        build_id = self.tag_map.get(tag or DEFAULT_TAG)
        return self.builds.get(build_id) if build_id else None

    def latest(self) -> Build | None:
        return max(self.builds.values(), key=lambda b: b.created_at, default=None)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> BuiltTemplate:
        builds = {k: Build(**v) for k, v in d.pop("builds").items()}
        t = cls(**d, builds=builds)
        for b in builds.values():
            if not b.done:  # the process that ran it ended
                b.fail("the server stopped during this build", None)
        return t


class BuiltTemplates:
    """The built templates of this server (see the module's doc), kept under `root`."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._by_id: dict[str, BuiltTemplate] | None = None
        # Upload links carry a token made from this process's secret (the uploader sends no key).
        self._secret = secrets.token_bytes(32)
        self.upload_quota = MAX_UPLOAD_BYTES_PER_KEY
        self._uploading: collections.Counter[str] = collections.Counter()  # owner -> bytes in flight
        self.entry_quota = MAX_UNPACK_ENTRIES_PER_KEY
        self._unpacking: collections.Counter[str] = collections.Counter()  # owner -> entries read

    def _all(self) -> dict[str, BuiltTemplate]:
        return self._by_id if self._by_id is not None else self._merge()

    def _merge(self) -> dict[str, BuiltTemplate]:
        """The records, with those on disk this process does not hold added (read at first use,
        or made since by another process that shares the directory: a replica of a cluster) and
        those gone from it dropped (deleted by another; a build of one running here then ends as
        a build of a deleted template, `finish`); those it holds stay as they are here (their
        builds run here, and every change is written at once)."""
        if self._by_id is None:
            self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
            self._by_id = {}
        on_disk = set()
        for p in self.root.glob("*.json"):
            on_disk.add(p.stem)
            if p.stem in self._by_id:
                continue
            t = read_record(p, BuiltTemplate.from_json)
            if t is not None:
                self._by_id[t.id] = t
        for gone in set(self._by_id) - on_disk:
            del self._by_id[gone]
        return self._by_id

    def save(self, t: BuiltTemplate) -> None:
        self._all()
        write_record(self.root, t.id, t.to_json())

    # --- lookup ----------------------------------------------------------------------------------

    def exists(self, template_id: str) -> bool:
        return template_id in self._all()

    def of(self, owner: str) -> list[BuiltTemplate]:
        return sorted((t for t in self._merge().values() if t.owner == owner), key=lambda t: t.created_at)

    def get(self, owner: str, ref: str) -> BuiltTemplate:
        """`owner`'s template by id or name (a tag, if any, is ignored); NotFound otherwise."""
        t = self.find(owner, ref)
        if t is None:
            raise NotFound(f"template {ref!r} not found")
        return t

    def find(self, owner: str, ref: str) -> BuiltTemplate | None:
        if not isinstance(ref, str) or not ref:
            return None
        t = self._find(owner, ref)
        if t is None or not (self.root / f"{t.id}.json").exists():  # made, or deleted, elsewhere
            self._merge()
            t = self._find(owner, ref)
        return t

    def _find(self, owner: str, ref: str) -> BuiltTemplate | None:
        t = self._all().get(ref)
        if t is not None and t.owner == owner:
            return t
        name, _ = split_ref(ref)
        return next((t for t in self._all().values() if t.owner == owner and t.name == name), None)

    def ready_build(self, owner: str, ref: str) -> tuple[BuiltTemplate, Build] | None:
        """The ready build `ref` (`name`, `name:tag` or an id) names, or None if it names none."""
        t = self.find(owner, ref)
        if t is None:
            return None
        _, tag = split_ref(ref) if ref != t.id else (None, None)
        b = t.build_of(tag)
        return (t, b) if b is not None and b.status == "ready" else None

    def cached(self, owner: str, digest: str) -> Build | None:
        """A ready build of `owner`'s with this digest."""
        for t in self.of(owner):
            for b in t.builds.values():
                if b.status == "ready" and b.digest == digest and b.checkpoint:
                    return b
        return None

    # --- changes ---------------------------------------------------------------------------------

    def request(
        self, owner: str, ref: str, tags: list[str], cpu_count: int, memory_mb: int
    ) -> tuple[BuiltTemplate, Build]:
        """A new build (waiting) of `owner`'s template named by `ref` (made if new)."""
        name, tag = split_ref(ref)
        check_name(name)
        wanted = list(dict.fromkeys([*([tag] if tag else []), *tags])) or [DEFAULT_TAG]
        for tag_ in wanted:
            check_tag(tag_)
        now = time.time()
        t = self.find(owner, name)
        if t is None:
            if len(self.of(owner)) >= MAX_TEMPLATES_PER_KEY:
                raise QuotaExceeded(f"at most {MAX_TEMPLATES_PER_KEY} templates per key")
            t = BuiltTemplate(
                id=f"tpl-{uuid.uuid4().hex[:16]}", owner=owner, name=name, created_at=now, updated_at=now
            )
            self._all()[t.id] = t
        t.cpu_count, t.memory_mb, t.updated_at = cpu_count, memory_mb, now
        b = Build(id=str(uuid.uuid4()), template_id=t.id, created_at=now, tags=wanted)
        t.builds[b.id] = b
        self.save(t)
        return t, b

    def finish(self, t: BuiltTemplate, b: Build) -> list[str]:
        """Records a finished build: a ready one takes its tags; returns the checkpoints of the
        builds left without a tag (the caller deletes them)."""
        if t.id not in self._all():  # deleted while it was building
            return [b.checkpoint] if b.checkpoint else []
        t.updated_at = time.time()
        dropped: list[str] = []
        if b.status == "ready":
            for tag in b.tags:
                t.tag_map[tag], t.tagged_at[tag] = b.id, t.updated_at
            dropped = self._untagged(t, keep=b.id)
        self.save(t)
        return dropped

    def _untagged(self, t: BuiltTemplate, keep: str) -> list[str]:
        named = set(t.tag_map.values()) | {keep}
        gone = [bid for bid, b in t.builds.items() if b.done and bid not in named and b.status == "ready"]
        return [t.builds.pop(bid).checkpoint for bid in gone]

    def assign_tags(self, owner: str, target: str, tags: list[str]) -> Build:
        """Tags the build `target` (`name:tag`) names with `tags` too."""
        t = self.get(owner, target)
        b = t.build_of(split_ref(target)[1])
        if b is None or b.status != "ready":
            raise NotFound(f"template {target!r} has no such build")
        for tag in tags:
            check_tag(tag)
            t.tag_map[tag], t.tagged_at[tag] = b.id, time.time()
        self.save(t)
        return b

    def remove_tags(self, owner: str, ref: str, tags: list[str]) -> list[str]:
        """Removes tags; returns the checkpoints of builds left without one."""
        t = self.get(owner, ref)
        missing = [tag for tag in tags if tag not in t.tag_map]
        if missing:
            raise NotFound(f"template {t.name!r} has no tag {missing[0]!r}")
        for tag in tags:
            t.tag_map.pop(tag)
            t.tagged_at.pop(tag, None)
        dropped = self._untagged(t, keep="")
        self.save(t)
        return dropped

    def delete(self, owner: str, ref: str) -> BuiltTemplate:
        """Removes a template (its record and uploads); the caller deletes its checkpoints."""
        t = self.get(owner, ref)
        self._all().pop(t.id, None)
        with contextlib.suppress(FileNotFoundError):
            (self.root / f"{t.id}.json").unlink()
        shutil.rmtree(self.files_dir(t.id), ignore_errors=True)
        return t

    def spawned(self, t: BuiltTemplate) -> None:
        t.spawn_count += 1
        t.last_spawned_at = time.time()

    # --- uploaded files --------------------------------------------------------------------------

    def files_dir(self, template_id: str) -> Path:
        return self.root / f"{template_id}.files"

    def upload_path(self, template_id: str, digest: str) -> Path:
        if not _DIGEST.fullmatch(digest or ""):
            raise InvalidRequest("a files hash is 64 lowercase hex digits")
        return self.files_dir(template_id) / digest

    def upload_token(self, template_id: str, digest: str) -> str:
        return hmac.new(self._secret, f"{template_id}/{digest}".encode(), hashlib.sha256).hexdigest()

    def upload_ok(self, template_id: str, digest: str, token: str | None) -> bool:
        return bool(token) and hmac.compare_digest(self.upload_token(template_id, digest), token or "")

    def upload_bytes(self, owner: str) -> int:
        """What `owner`'s uploads hold: on disk, and being written."""
        held = self._uploading[owner]
        for t in self.of(owner):
            with contextlib.suppress(FileNotFoundError):
                held += sum(
                    p.stat().st_size for p in self.files_dir(t.id).iterdir() if not p.name.startswith(".")
                )
        return held

    @contextlib.contextmanager
    def uploading(self, template_id: str) -> Iterator[Callable[[int], None]]:
        """One upload to `template_id`: the function it gets is told each chunk's size and raises
        `QuotaExceeded` once the key's uploads would pass `upload_quota`."""
        owner = self._all()[template_id].owner
        mine = 0

        def add(n: int) -> None:
            nonlocal mine
            before = mine
            mine += n
            self._uploading[owner] += n
            checked = before == 0 or before >> 20 != mine >> 20  # at the start and at each MiB
            if checked and self.upload_bytes(owner) > self.upload_quota:
                raise QuotaExceeded(
                    f"this key's uploaded files are at most {self.upload_quota >> 20} MiB on this "
                    "server: delete templates to make room"
                )

        try:
            yield add
        finally:
            self._uploading[owner] -= mine
            if self._uploading[owner] <= 0:
                del self._uploading[owner]

    @contextlib.contextmanager
    def unpacking(self, owner: str) -> Iterator[Callable[[int], None]]:
        """One copy step of `owner`'s reading its archive: the function it gets is told how many
        more entries were read and raises `QuotaExceeded` once the key's copies, all its builds
        together, would be reading more than `entry_quota` at once."""
        mine = 0

        def add(n: int) -> None:
            nonlocal mine
            mine += n
            self._unpacking[owner] += n
            if self._unpacking[owner] > self.entry_quota:
                raise QuotaExceeded(
                    f"this key's copy steps read at most {self.entry_quota} archive entries at once "
                    "on this server: copy fewer files, or in fewer builds at a time"
                )

        try:
            yield add
        finally:
            self._unpacking[owner] -= mine
            if self._unpacking[owner] <= 0:
                del self._unpacking[owner]
