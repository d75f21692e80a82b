"""Which of the server's templates serves a container image that a compatible API names.

The Prime and E2B APIs ask for an image (`python:3.11-slim`) or a template name; the server runs
templates. In order: a template of that name; a template whose `image` is that image; on a
container backend (docker, kubernetes), a template made for that image from the default one (it
runs that image: on docker as root with a writable root, as such clients expect of a container;
on kubernetes as the default template's user, since a root pod asks more of the cluster; one the
engine or registry does not have fails that sandbox's create as its platform's image pull
would); on the local backend, the template named `AGENT_TEMPLATE` (a root sandbox with a
writable root) when the server has one, else the pool's default template. The choice is reported
to the caller (the sandbox's log), never silent.
"""

from __future__ import annotations

import hashlib
from typing import Any

from sandboxes.errors import InvalidRequest, QuotaExceeded
from sandboxes.templates import EGRESS_BACKENDS, IMAGE_ROOT_BACKENDS, Template

__all__ = [
    "AGENT_TEMPLATE",
    "MAX_IMAGE_TEMPLATES",
    "default_templates",
    "template_for_image",
    "template_with_egress",
]

AGENT_TEMPLATE = "agent"
# Templates made for images on a container backend, at most (a bound on what callers can add).
MAX_IMAGE_TEMPLATES = 64
IMAGE_TEMPLATE_PREFIX = "image-"
EGRESS_TEMPLATE_PREFIX = "egress-"


def default_templates(backend: str) -> dict[str, Any] | None:
    """The templates of a server that serves the compatible APIs and was given none: the default
    template and the agent template (`IMAGE_ROOT_BACKENDS`). None: the pool's own default."""
    if backend not in IMAGE_ROOT_BACKENDS:
        return None

    return {
        "default": Template(backend=backend),
        # Its egress is a policy (empty: nothing reached) that the APIs' callers can change.
        AGENT_TEMPLATE: Template(name=AGENT_TEMPLATE, backend=backend, user="root", network=()),
    }


async def template_for_image(pool: Any, image: str | None) -> tuple[str, str]:
    """(template name, how it was chosen) for `image` on `pool`."""
    templates: dict[str, Any] = dict(getattr(pool, "templates", {}) or {})
    default = getattr(pool, "default_template", "default")
    if image:
        if image in templates:
            return image, "template of that name"
        for name, tp in templates.items():
            if getattr(tp, "image", None) == image:
                return name, f"template whose image is {image}"
        # Like the agent template where there is one (its network a policy that can change).
        base = templates.get(AGENT_TEMPLATE, templates.get(default))
        if base is not None and base.backend != "local":
            name = IMAGE_TEMPLATE_PREFIX + hashlib.sha256(image.encode()).hexdigest()[:12]
            if sum(n.startswith(IMAGE_TEMPLATE_PREFIX) for n in templates) >= MAX_IMAGE_TEMPLATES:
                raise QuotaExceeded(
                    f"this server runs at most {MAX_IMAGE_TEMPLATES} images not in its templates"
                )
            # A user's image has no agent of ours: docker mounts it in (a pod's image must have it).
            derived = base.replace(
                name=name,
                image=image,
                warm=0,
                labels={},
                agent_mount=base.backend == "docker",
                user="root" if base.backend in IMAGE_ROOT_BACKENDS else base.user,
            )
            await pool.add_template(derived)
            return name, f"the default template with image {image}"
    if AGENT_TEMPLATE in templates:
        return AGENT_TEMPLATE, "no template runs this image: the agent template"
    return default, "no template runs this image: the default template"


async def template_with_egress(pool: Any, template: str, rules: tuple[str, ...]) -> str:
    """A template like `template` whose network is the allow-list `rules` (made once per pair,
    at most `MAX_IMAGE_TEMPLATES` of them); InvalidRequest where the backend cannot enforce one."""
    templates: dict[str, Any] = dict(getattr(pool, "templates", {}) or {})
    base = templates[template]
    if base.backend not in EGRESS_BACKENDS:
        raise InvalidRequest(
            f"an egress allow-list is not available on the {base.backend} backend of this server"
        )
    if base.has_egress and base.egress_allow == rules:
        return template
    digest = hashlib.sha256("\0".join((template, *rules)).encode()).hexdigest()[:12]
    name = EGRESS_TEMPLATE_PREFIX + digest
    if name not in templates:
        if sum(n.startswith(EGRESS_TEMPLATE_PREFIX) for n in templates) >= MAX_IMAGE_TEMPLATES:
            raise QuotaExceeded(f"this server runs at most {MAX_IMAGE_TEMPLATES} distinct allow-lists")
        await pool.add_template(base.replace(name=name, network=rules, warm=0, labels={}))
    return name
