"""The Dockerfile of a declarative image (the SDK's `Image`: `buildInfo.dockerfileContent`) as a
template build (`template_build.py`): `FROM` is the base image, `RUN`, `ENV`, `WORKDIR` and
`USER` are the build's steps, `ENTRYPOINT` / `CMD` its start command. `COPY` / `ADD` need the
build context the SDK uploads to the platform's object storage, which this server does not serve:
refused, as is any other instruction, with the instruction named."""

from __future__ import annotations

import json
import shlex
from typing import Any

from sandboxes.server.http.endpoint import Refused
from sandboxes.server.template_build import Step

__all__ = ["Declared", "declared"]

IGNORED = frozenset({"LABEL", "EXPOSE", "ARG", "STOPSIGNAL", "HEALTHCHECK", "SHELL", "VOLUME", "ONBUILD"})


class Declared:
    """A parsed Dockerfile: its base `image`, build `steps` and `start_cmd`."""

    def __init__(self, image: str, steps: tuple[Step, ...], start_cmd: str) -> None:
        self.image, self.steps, self.start_cmd = image, steps, start_cmd


def _lines(text: str) -> list[str]:
    """Instructions, continuation lines joined, comments and blank lines dropped."""
    out: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        out.append(pending + line)
        pending = ""
    if pending.strip():
        out.append(pending.strip())
    return out


def _command(arg: str) -> str:
    """A shell command of an instruction's argument (its exec form, a JSON array, joined)."""
    if arg.startswith("["):
        try:
            argv = json.loads(arg)
        except ValueError:
            return arg
        if isinstance(argv, list) and all(isinstance(a, str) for a in argv):
            return shlex.join(argv)
    return arg


def declared(build_info: Any) -> Declared:
    """The build a `buildInfo` declares (a one-line `FROM` is a build with no steps)."""
    text = build_info.get("dockerfileContent") if isinstance(build_info, dict) else None
    if not isinstance(text, str) or not text.strip():
        raise Refused(400, "buildInfo.dockerfileContent is required")
    image, steps, entry, cmd = "", [], "", ""
    for line in _lines(text):
        op, _, arg = line.partition(" ")
        op, arg = op.upper(), arg.strip()
        if op == "FROM":
            if image:
                raise Refused(400, "multi-stage Dockerfiles are not supported by this server")
            image = arg.split()[0] if arg else ""
        elif not image:
            raise Refused(400, f"the Dockerfile must start with FROM, not {op}")
        elif op == "RUN":
            steps.append(Step("run", (_command(arg),)))
        elif op == "ENV":
            pairs = [p.partition("=") for p in shlex.split(arg)]
            if not pairs or any(not sep for _, sep, _ in pairs):
                raise Refused(400, f"ENV takes NAME=value pairs: {arg!r}")
            steps.append(Step("env", tuple(x for k, _, v in pairs for x in (k, v))))
        elif op == "WORKDIR":
            steps.append(Step("workdir", (shlex.split(arg)[0] if arg else "/",)))
        elif op == "USER":
            steps.append(Step("user", (arg,)))
        elif op == "ENTRYPOINT":
            entry = _command(arg)
        elif op == "CMD":
            cmd = _command(arg)
        elif op in ("COPY", "ADD"):
            raise Refused(
                400,
                f"{op} needs the build context uploaded to object storage, which this server does not serve: "
                "run the commands that make those files, or build a template through the E2B template API",
            )
        elif op not in IGNORED:
            raise Refused(400, f"the Dockerfile instruction {op} is not supported by this server")
    if not image:
        raise Refused(400, "the Dockerfile has no FROM")
    return Declared(image, tuple(steps), f"{entry} {cmd}".strip())
