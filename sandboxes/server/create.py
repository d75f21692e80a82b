"""What a create asks for (`CreateSpec`), and what its source resolves to (`Source`).

Every surface's create is: parse its request, fill a `CreateSpec`, `ServerCore.create(owner,
spec)`, answer its view of the record. The spec names where the sandbox comes from; it is
resolved once here, in this order:

1. `checkpoint`: one of the owner's checkpoints (a version of a volume is not one);
2. `template` naming a template of the server's: that template;
3. `template` or `image` naming a template the owner built (`name`, `name:tag` or its id) with a
   ready build: the build's checkpoint, its work dir, its environment and its start command;
   one with no ready build is `BuildNotReady`;
4. `template`: an unknown one is `NotFound` when it is claimed;
   `image`: the template that runs that image (`image_templates.template_for_image`); neither:
   the template the HTTP APIs default to.

A spec with a `network` policy needs a template whose egress can be given: a template without one
is replaced by the same template with an empty allow-list (`template_with_egress`), and the
create gives the sandbox the policy before anything of it runs. A policy that reaches nothing,
asked of a template with no network at all, is what the template has already.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from sandboxes import errors as E
from sandboxes.egress import EgressPolicy
from sandboxes.server.image_templates import template_for_image, template_with_egress

__all__ = ["BuildNotReady", "CreateSpec", "Source", "resolve"]


class BuildNotReady(E.NotFound):
    """The spec names a template the owner built that has no ready build of that tag."""


@dataclass(frozen=True)
class CreateSpec:
    """A sandbox as a surface asks for it (see the module's docstring for the source)."""

    template: str | None = None
    image: str | None = None
    checkpoint: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    files: list[tuple[str, bytes, int]] = field(default_factory=list)  # (path, data, mode; 0: 0644)
    volumes: dict[str, tuple[str, bool]] | None = None  # path -> (the owner's volume, read-only)
    versioned_volumes: list[tuple[str, str, bool]] | None = None  # (volume name, path, read-only)
    network: EgressPolicy | None = None  # None: the template's
    ttl_s: float | None = None
    idle_s: float | None = None  # its idle bound (`Record.idle_s`)
    on_ttl: str = "delete"  # or "pause" (`Record.on_ttl`)
    pause_memory: bool = True
    timeout: float | None = None  # how long to wait for a free sandbox
    idempotency_key: str | None = None


@dataclass(frozen=True)
class Source:
    """What a spec's source resolved to: the server template its sandbox is of, the checkpoint
    it is made from, and for a built template its template and build (work dir, environment,
    start command)."""

    template: str
    checkpoint: str | None = None
    built: tuple[Any, Any] | None = None  # (BuiltTemplate, Build)
    network: EgressPolicy | None = None  # what the create gives the sandbox (None: its template's)
    why: str = ""  # how the template was chosen, for people

    @property
    def build(self) -> Any:
        return self.built[1] if self.built is not None else None


async def resolve(core: Any, owner: str, spec: CreateSpec) -> Source:
    """The source of `spec` for `owner` on `core` (a `ServerCore`), with a template that can be
    given `spec.network` when it is set."""
    pool = core.pool
    if spec.checkpoint is not None:
        cp = core.restorable(owner, spec.checkpoint)
        source = Source(cp.template, cp.id, why=f"restored from checkpoint {cp.id}")
    elif spec.template is not None and spec.template in pool.templates:
        # Nothing of the built templates' store is read (the manager's state directory may be
        # read-only where no template is built).
        source = Source(spec.template, why="template of that name")
    else:
        ref = spec.template or spec.image
        built = core.built.ready_build(owner, ref) if ref else None
        if built is not None:
            cp = core.checkpoint_of(owner, built[1].checkpoint)
            source = Source(cp.template, cp.id, built, why=f"template {built[0].name!r} built on this server")
        elif ref and core.built.find(owner, ref) is not None:
            raise BuildNotReady(f"template {ref!r} has no ready build of that tag")
        elif spec.template is not None:
            source = Source(spec.template, why="template of that name")
        else:
            template, why = await template_for_image(pool, spec.image)
            source = Source(template, why=why)
    tp = pool.templates.get(source.template)
    for _, path, _ in spec.versioned_volumes or ():
        if tp is not None and (tp.work_dir + "/").startswith(path + "/"):
            raise E.InvalidRequest(f"mount_path {path!r} holds the sandbox's work dir {tp.work_dir!r}")
    if spec.network is None or tp is None or (spec.network == EgressPolicy() and tp.network is False):
        return source
    source = dataclasses.replace(source, network=spec.network)
    if tp.has_egress:
        return source
    if source.checkpoint is not None:
        raise E.InvalidRequest(
            f"network rules cannot be given to a sandbox made from checkpoint {source.checkpoint}: its "
            f"template {source.template!r} runs without an egress policy"
        )
    return dataclasses.replace(source, template=await template_with_egress(pool, source.template, ()))
