"""Running a template build: its steps in a sandbox of its base, saved as a kept checkpoint.

The sandbox is one of the server's templates (the base image's, `image_templates.py`), made from
the checkpoint of the built template it starts from if any, claimed for the build's key (its
quotas apply) and deleted when the build ends. Steps run in order: `run` a shell command (as the
sandbox's user; its output is the build's log), `copy` an uploaded archive's files to a path,
`env` variables for the later steps (build-time only), `workdir` the directory of the later steps
and of the template's sandboxes (made if missing), `user` who runs the later steps and, by
default, the template's programs (another user than the sandbox's own is one of its
`/etc/passwd`, in a sandbox whose programs run as root). A `setup` command of the surface's runs
before the steps, as root (what its platform puts in every template, such as E2B's `user`).
A start command then runs in the background, and the ready command is retried until it succeeds;
the file system is then checkpointed. A failed step fails the build with its output and leaves no
template behind.

A build is named by the digest of its base and steps (copied files by their content digest): the
same build asked for again is a cache hit, a new record on the same layers, made in milliseconds,
unless the request forces a rebuild. Builds of one key run `BUILDS_PER_KEY` at a time; the rest
wait. The build's sandbox reaches the public internet (never this host or its networks) unless
its template has no network at all.

A copy step's archive is read by a process of its own (`copy_reader.py`), `READERS` at most at
once on this server, as a stream: bounded per archive (`MAX_COPY_ENTRIES` entries,
`MAX_COPY_BYTES` of data) and per key (`BuiltTemplates.entry_quota` entries read at once by its
copies), checked before anything is written, then written into the sandbox a bounded batch at a
time; the server's event loop and threads never parse it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import json
import logging
import posixpath
import shlex
import sys
import time
from collections import defaultdict
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

from sandboxes import errors as E
from sandboxes.egress import EgressPolicy
from sandboxes.state.built_templates import Build, BuiltTemplate, BuiltTemplates
from sandboxes.types import Limits

__all__ = ["BUILDS_PER_KEY", "TEMPLATE_LABEL", "BuildSpec", "Builder", "Step"]

log = logging.getLogger("sandboxes.server")

BUILDS_PER_KEY = 2
# A step's wall time; a build's sandbox lives at most as long as all of them.
STEP_TIMEOUT_S = 3600.0
BUILD_TTL_S = 6 * 3600.0
READY_TIMEOUT_S = 120.0
# How long a build waits for its sandbox: the engine's first container of an image can take
# minutes (each create is bounded by its template's `create_timeout_s`, and fails fast).
BASE_CLAIM_TIMEOUT_S = 600.0
READY_INTERVAL_S = 0.2
TAIL_LINES = 5  # of a failed command's output, in the build's error
# Per copy step: the data its archive unpacks to (one file is held whole in the server's memory
# while written) and its entries (each one a header the reader parses, at most one inode made).
MAX_COPY_BYTES = 256 << 20
MAX_COPY_ENTRIES = 100_000
READERS = 4  # archives read at once on this server, each by a process of its own
READER = Path(__file__).with_name("copy_reader.py")
READER_LINE_BYTES = 64 << 10  # of one record of the reader (its paths are at most 4 KiB)
MAX_LOG_LINE = 4096  # characters of one line of a step's output kept in the build's log
# A copy writes into its sandbox one batch at a time: files with one call, directories and
# links with one command (a command is one argument of at most 128 KiB).
WRITE_BATCH_BYTES = 8 << 20
WRITE_BATCH_FILES = 1000
SHELL_BATCH_CHARS = 64 << 10
STEP_LIMITS = Limits(wall_time_s=STEP_TIMEOUT_S, cpu_time_s=STEP_TIMEOUT_S, max_output_bytes=64 << 20)
# Marks a checkpoint that holds a build (the snapshot and checkpoint APIs do not list it).
TEMPLATE_LABEL = "sandboxes.template"
STEP_KINDS = ("run", "copy", "env", "workdir", "user")


@dataclass(frozen=True)
class Step:
    kind: str  # one of STEP_KINDS
    args: tuple[str, ...]
    files: str = ""  # copy: the content digest of its uploaded archive
    force: bool = False


@dataclass(frozen=True)
class BuildSpec:
    """What to build: on `template` (the server's), from `checkpoint` (a built template's) if set."""

    template: str
    base: str  # what the base is, for the digest (an image, or a build's digest)
    steps: tuple[Step, ...]
    user: str  # who runs the sandbox's programs, as the surface names it
    # Run as the sandbox's own user before the steps: the platform's part of every template.
    setup: str = ""
    checkpoint: str | None = None
    work_dir: str = ""
    start_cmd: str = ""
    ready_cmd: str = ""
    force: bool = False
    # Whether `env` steps also set the environment of the template's sandboxes (a Dockerfile's
    # ENV), not only of the later steps (E2B's `set_envs`).
    keep_env: bool = False

    def digest(self) -> str:
        doc = [
            self.template,
            self.base,
            [[s.kind, list(s.args), s.files] for s in self.steps],
            self.start_cmd,
            self.ready_cmd,
            self.keep_env,
        ]
        if self.setup:
            doc.append(self.setup)
        return hashlib.sha256(json.dumps(doc, separators=(",", ":")).encode()).hexdigest()


class Builder:
    """Runs builds for a server core (`core`) and records them in `store`."""

    def __init__(self, core: Any, store: BuiltTemplates) -> None:
        self.core = core
        self.store = store
        self._slots: defaultdict[str, asyncio.Semaphore] = defaultdict(
            lambda: asyncio.Semaphore(BUILDS_PER_KEY)
        )
        self._readers = asyncio.Semaphore(READERS)
        self._tasks: set[asyncio.Task[None]] = set()

    def start(self, t: BuiltTemplate, b: Build, spec: BuildSpec) -> None:
        """Runs the build in the background (its state is `b`'s)."""
        task = asyncio.ensure_future(self._run(t, b, spec))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def run(self, t: BuiltTemplate, b: Build, spec: BuildSpec) -> None:
        """Runs the build and returns when it has ended (its state is `b`'s)."""
        await self._run(t, b, spec)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _run(self, t: BuiltTemplate, b: Build, spec: BuildSpec) -> None:
        b.digest = spec.digest()
        try:
            hit = (
                None
                if spec.force or any(s.force for s in spec.steps)
                else self.store.cached(t.owner, b.digest)
            )
            if hit is not None:
                self._reuse(t, b, hit)
            else:
                async with self._slots[t.owner]:
                    b.status = "building"
                    await self._build(t, b, spec)
        except asyncio.CancelledError:
            b.fail("the server stopped during this build", None)
            raise
        except E.SandboxError as e:
            b.fail(f"{type(e).__name__}: {e.message}", None)
        except Exception as e:  # a build's failure is its own, never the server's
            log.exception("template build failed", extra={"template": t.id, "build": b.id})
            b.fail(f"the build failed: {e}", None)
        finally:
            for cp in self.store.finish(t, b):
                self.drop_checkpoint(t.owner, cp)

    def _reuse(self, t: BuiltTemplate, b: Build, hit: Build) -> None:
        cp = self.core.checkpoint_of(t.owner, hit.checkpoint)
        self.core.quotas.check_checkpoints(t.owner, *self.core.pool.checkpoints.usage(t.owner))
        mine = self.core.pool.checkpoints.add(
            template=cp.template,
            layers=cp.layers,
            owner=t.owner,
            name=t.name,
            size=cp.bytes,
            ttl_s=None,
            labels={TEMPLATE_LABEL: t.id},
        )
        b.checkpoint, b.work_dir, b.user, b.run_as = mine.id, hit.work_dir, hit.user, hit.run_as
        b.start_cmd, b.ready_cmd, b.env, b.cached = hit.start_cmd, hit.ready_cmd, dict(hit.env), True
        b.log(f"CACHED: the same base and steps as build {hit.id}")
        b.status, b.finished_at = "ready", time.time()

    async def _build(self, t: BuiltTemplate, b: Build, spec: BuildSpec) -> None:
        started = time.monotonic()
        b.log(f"[base] {spec.base} (template {spec.template})", step="base")
        rec = await self.core.claim(
            t.owner,
            spec.template,
            ttl_s=BUILD_TTL_S,
            checkpoint=spec.checkpoint,
            timeout=BASE_CLAIM_TIMEOUT_S,
        )
        try:
            if self.core.pool.templates[rec.template].has_egress:
                await self.core.set_network(rec, EgressPolicy(deny=True))
            run = _Run(self, t, b, rec.sandbox, spec)
            if not await run.steps():
                return
            if spec.start_cmd and not await run.start(spec.start_cmd, spec.ready_cmd):
                return
            cp = await self.core.checkpoint(rec, name=t.name, ttl_s=None, labels={TEMPLATE_LABEL: t.id})
            b.checkpoint, b.work_dir, b.user, b.run_as = cp.id, run.work_dir, run.user or spec.user, run.user
            b.start_cmd, b.ready_cmd = spec.start_cmd, spec.ready_cmd
            b.env = dict(run.env) if spec.keep_env else {}
            b.log(
                f"[finalize] saved {cp.bytes} bytes of changes as layer {cp.layers[-1][:12]}", step="finalize"
            )
            b.log(f"build finished in {time.monotonic() - started:.1f} s")
        finally:
            await self.core.delete_record(rec, "build ended")
        # Ready only now, with no await before `_run` gives it its tags: a client that sees it
        # ready finds it by its tags.
        b.status, b.finished_at = "ready", time.time()

    def drop_checkpoint(self, owner: str, checkpoint_id: str) -> None:
        """Deletes a build's checkpoint of `owner`'s (gone already: nothing)."""
        try:
            self.core.pool.checkpoints.delete(checkpoint_id, owner)
        except E.NotFound:
            pass

    @contextlib.asynccontextmanager
    async def reading(
        self, owner: str, archive: Path, src: str, dest: str, mode: int | None
    ) -> AsyncIterator[_Archive]:
        """The archive of one of `owner`'s copy steps, as its reader process reports it: `READERS`
        at once on this server (a key runs `BUILDS_PER_KEY` builds, so no key takes them all), its
        entries counted against the key's `entry_quota` until the step ends."""
        async with self._readers:
            with self.store.unpacking(owner) as charge:
                async with _Archive(archive, src, dest, mode, charge) as a:
                    yield a


class _Run:
    """One build's steps in its sandbox (`sb`)."""

    def __init__(self, builder: Builder, t: BuiltTemplate, b: Build, sb: Any, spec: BuildSpec) -> None:
        self.builder, self.store = builder, builder.store
        self.t, self.b, self.sb, self.spec = t, b, sb, spec
        self.env: dict[str, str] = {}
        self.work_dir = spec.work_dir
        # Who runs the next steps: "" for the sandbox's programs' own user, else a user of its
        # /etc/passwd (the agent says whether the sandbox has it).
        self.user = ""
        self.tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)  # of the last command

    async def steps(self) -> bool:
        if self.spec.setup:
            self.b.log("[base] the platform's setup", step="base")
            if await self._shell(self.spec.setup, "base") != 0:
                tail = " / ".join(self.tail)
                self.b.fail(f"the platform's setup of the template failed: {tail}", "base")
                return False
        for i, s in enumerate(self.spec.steps, start=1):
            step = str(i)
            self.b.log(f"[builder {i}/{len(self.spec.steps)}] {s.kind.upper()} {' '.join(s.args)}", step=step)
            try:
                ok = await getattr(self, f"_{s.kind}")(s, step)
            except (E.InvalidRequest, E.QuotaExceeded) as e:
                self.b.fail(f"step {i} ({s.kind}): {e.message}", step)
                return False
            if not ok:
                return False
        return True

    async def _run(self, s: Step, step: str) -> bool:
        user = self._as(s.args[1]) if len(s.args) > 1 and s.args[1] else self.user
        code = await self._shell(s.args[0], step, user)
        if code != 0:
            tail = " / ".join(self.tail)
            self.b.fail(f"step {step} (run {s.args[0]!r}) failed with exit code {code}: {tail}", step)
            return False
        return True

    async def _env(self, s: Step, step: str) -> bool:
        if len(s.args) % 2:
            raise E.InvalidRequest("env takes name, value pairs")
        self.env.update(zip(s.args[::2], s.args[1::2], strict=True))
        return True

    async def _workdir(self, s: Step, step: str) -> bool:
        path = posixpath.normpath(posixpath.join(self.work_dir or "/", s.args[0]))
        code = await self._shell(f"mkdir -p {shlex.quote(path)}", step)
        if code != 0:
            self.b.fail(f"step {step}: cannot make the work dir {path}", step)
            return False
        self.work_dir = path
        return True

    async def _user(self, s: Step, step: str) -> bool:
        user = self._as(s.args[0])
        if user and await self._shell("true", step, user) != 0:  # the agent refuses a missing user
            self.b.fail(f"step {step}: user {s.args[0]!r} cannot run programs in this sandbox", step)
            return False
        self.user = user
        return True

    def _as(self, user: str) -> str:
        """The agent's name of `user`: "" for the sandbox's own (as the surface names it)."""
        return "" if not user or user == self.spec.user else user

    async def _copy(self, s: Step, step: str) -> bool:
        src, dest = s.args[0], s.args[1]
        user = s.args[2] if len(s.args) > 2 else ""
        mode = int(s.args[3], 8) if len(s.args) > 3 and s.args[3] else None
        user = self._as(user) if user else self.user
        path = self.store.upload_path(self.t.id, s.files)
        if not path.exists():
            self.b.fail(f"step {step}: the files of {src!r} were not uploaded", step)
            return False
        dest = posixpath.normpath(posixpath.join(self.work_dir or "/", dest)) + (
            "/" if dest.endswith("/") else ""
        )
        placed = _Placed(self, step, user)
        async with self.builder.reading(self.t.owner, path, src, dest, mode) as archive:
            if not await archive.check():
                self.b.fail(f"step {step}: {src!r} matches no uploaded file", step)
                return False
            async with contextlib.aclosing(archive.entries()) as entries:
                async for kind, target, value in entries:
                    if kind == "file":
                        placed.file(target, value)
                    elif kind == "dir":
                        placed.command(f"mkdir -p {shlex.quote(target)}")
                    else:
                        parent = shlex.quote(posixpath.dirname(target) or "/")
                        placed.command(
                            f"mkdir -p {parent} && ln -sfn {shlex.quote(value)} {shlex.quote(target)}"
                        )
                    if placed.full and not await placed.flush():
                        return False
        if not await placed.flush():
            return False
        n = placed.files
        self.b.log(f"copied {n} file{'' if n == 1 else 's'} to {dest}", step=step)
        return True

    async def start(self, start_cmd: str, ready_cmd: str) -> bool:
        """Starts the template's start command and waits until its ready command succeeds."""
        self.b.log(f"[start] {start_cmd}", step="finalize")
        error = await start_and_wait(self.sb, start_cmd, ready_cmd, self.work_dir, self.env, self.user)
        if error:
            self.b.fail(error, "finalize")
            return False
        self.b.log("ready", step="finalize")
        return True

    async def _shell(self, command: str, step: str, user: str = "") -> int:
        """Runs `command` with `sh -c` as `user` (`_as`), its output the build's log; its exit
        status. A user the sandbox does not have is a failed command, its reason in the log."""
        pending = {"stdout": b"", "stderr": b""}
        result = None
        self.tail.clear()
        try:
            stream = self.sb.exec_stream(
                ["/bin/sh", "-c", command],
                env=self.env,
                cwd=self.work_dir or None,
                limits=STEP_LIMITS,
                stdin=b"",
                user=user or None,
            )
            async with stream:
                async for ev in stream:
                    if ev.kind in pending:
                        lines = (pending[ev.kind] + ev.data).split(b"\n")
                        pending[ev.kind] = lines.pop()
                        for line in lines:
                            self._line(line, ev.kind, step)
                    elif ev.kind == "exit":
                        result = ev.result
        except E.InvalidRequest as e:
            self._line(e.message.encode(), "stderr", step)
            return -1
        for kind, rest in pending.items():
            if rest:
                self._line(rest, kind, step)
        if result is None:
            return -1
        if result.timed_out:
            self.b.log(f"timed out after {STEP_TIMEOUT_S:.0f} s", "error", step)
        return result.shell_status

    def _line(self, line: bytes, kind: str, step: str) -> None:
        text = line[: MAX_LOG_LINE * 4].decode(errors="replace").rstrip("\r")[:MAX_LOG_LINE]
        self.tail.append(text)
        self.b.log(text, "info" if kind == "stdout" else "warn", step)


async def start_and_wait(
    sb: Any, start_cmd: str, ready_cmd: str, cwd: str, env: dict[str, str], user: str = ""
) -> str:
    """Starts `start_cmd` in the background of `sb` (as `user`, "" its programs' own) and retries
    `ready_cmd` until it succeeds; an error message, or "" once ready."""
    launched = await sb.exec(
        ["/bin/sh", "-c", f"nohup /bin/sh -c {shlex.quote(start_cmd)} >/dev/null 2>&1 &"],
        env=env,
        cwd=cwd or None,
        keep_descendants=True,
        timeout=30,
        user=user or None,
    )
    if launched.exit_code != 0:
        return f"the start command could not start: {launched.stderr.decode(errors='replace')}"
    if not ready_cmd:
        return ""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        r = await sb.exec(
            ["/bin/sh", "-c", ready_cmd], env=env, cwd=cwd or None, timeout=READY_TIMEOUT_S, user=user or None
        )
        if r.exit_code == 0 and not r.timed_out:
            return ""
        await asyncio.sleep(READY_INTERVAL_S)
    return f"the ready command {ready_cmd!r} did not succeed within {READY_TIMEOUT_S:.0f} s"


class _Placed:
    """What a copy puts in its sandbox, written one bounded batch at a time: the files with one
    `write_files`, then the directories and links with one command (in the archive's order)."""

    def __init__(self, run: _Run, step: str, user: str) -> None:
        self.run, self.step, self.user = run, step, user
        self.batch: dict[str, tuple[bytes, int]] = {}
        self.size = 0
        self.commands: list[str] = []
        self.chars = 0
        self.files = 0  # written so far

    def file(self, target: str, value: tuple[bytes, int]) -> None:
        self.batch[target] = value
        self.size += len(value[0])

    def command(self, command: str) -> None:
        self.commands.append(command)
        self.chars += len(command) + 4

    @property
    def full(self) -> bool:
        return (
            self.size >= WRITE_BATCH_BYTES
            or len(self.batch) >= WRITE_BATCH_FILES
            or self.chars >= SHELL_BATCH_CHARS
        )

    async def flush(self) -> bool:
        if self.batch:
            await self.run.sb.write_files(self.batch, user=self.user or None)
            self.files += len(self.batch)
            self.batch, self.size = {}, 0
        if self.commands:
            code = await self.run._shell(" && ".join(self.commands), self.step, self.user)
            self.commands, self.chars = [], 0
            if code != 0:
                self.run.b.fail(
                    f"step {self.step}: cannot make the directories and links of the copy", self.step
                )
                return False
        return True


class _Archive:
    """A copy step's archive as its reader process (`copy_reader.py`) reports it: `check` reads
    to the end of its first reading (each entry read charged to `charge`), `entries` then gives
    what goes where. A refusal of the reader is `InvalidRequest` with its message; the process
    is killed when the step ends, however it ends."""

    def __init__(
        self, path: Path, src: str, dest: str, mode: int | None, charge: Callable[[int], None]
    ) -> None:
        self.path, self.src, self.dest, self.mode = path, src, dest, mode
        self.charge = charge
        self.proc: asyncio.subprocess.Process | None = None

    async def __aenter__(self) -> Self:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-I",
            str(READER),
            str(self.path),
            self.src,
            self.dest,
            "" if self.mode is None else f"{self.mode:o}",
            str(MAX_COPY_ENTRIES),
            str(MAX_COPY_BYTES),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            limit=READER_LINE_BYTES,
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.proc is not None:
            if self.proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    self.proc.kill()
            await self.proc.wait()

    async def _record(self) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdout is not None
        try:
            line = await self.proc.stdout.readline()
        except ValueError:  # a line over the stream's limit
            raise E.InvalidRequest(f"the archive of {self.src!r} could not be read") from None
        if not line.endswith(b"\n"):
            code = await self.proc.wait()
            raise E.InvalidRequest(
                f"the archive of {self.src!r} could not be read (its reader exited with {code})"
            )
        rec = json.loads(line)
        if "error" in rec:
            raise E.InvalidRequest(str(rec["error"]))
        return rec

    async def check(self) -> int:
        """The number of the archive's entries the copy takes, once all are checked."""
        charged = 0
        while True:
            rec = await self._record()
            read = int(rec.get("read", rec.get("checked", charged)))
            self.charge(read - charged)
            charged = read
            if "checked" in rec:
                return int(rec["matched"])

    async def entries(self) -> AsyncGenerator[tuple[str, str, Any]]:
        """("file", path, (data, mode)), ("dir", path, None) and ("link", path, target)."""
        assert self.proc is not None and self.proc.stdout is not None
        while "end" not in (rec := await self._record()):
            if "file" in rec:
                size = int(rec["size"])
                if not 0 <= size <= MAX_COPY_BYTES:
                    raise E.InvalidRequest(f"a file of the archive of {self.src!r} is too large")
                try:
                    data = await self.proc.stdout.readexactly(size)
                except asyncio.IncompleteReadError:
                    raise E.InvalidRequest(f"the archive of {self.src!r} could not be read") from None
                yield "file", str(rec["file"]), (data, int(rec["mode"]) & 0o7777)
            elif "dir" in rec:
                yield "dir", str(rec["dir"]), None
            elif "link" in rec:
                yield "link", str(rec["link"]), str(rec["to"])
