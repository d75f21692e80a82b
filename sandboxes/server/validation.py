"""Validation of every request field, with messages that say what is wrong and what is allowed.

Everything here raises `InvalidRequest` (INVALID_ARGUMENT). An invalid request must never reach a
sandbox, so it can never kill one.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from sandboxes._proto.convert import limits_from_pb
from sandboxes.errors import InvalidRequest

__all__ = ["Bounds", "Validator"]

_LABEL_KEY = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._/-]{0,126}[A-Za-z0-9])?$")
_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


@dataclass(frozen=True)
class Bounds:
    """What the server accepts; anything above is an absurd request, refused up front."""

    max_exec_timeout_s: float = 24 * 3600.0
    max_claim_timeout_s: float = 3600.0
    max_ttl_s: float = 7 * 24 * 3600.0
    max_argv: int = 65536
    max_env: int = 4096
    max_labels: int = 64
    max_label_value: int = 256
    max_files: int = 10000
    max_path: int = 4096
    max_chunk_size: int = 16 << 20


class Validator:
    def __init__(self, bounds: Bounds = Bounds()) -> None:
        self.b = bounds

    # -- scalars -----------------------------------------------------------------------------

    @staticmethod
    def _no_nul(what: str, value: str) -> None:
        if "\x00" in value:
            raise InvalidRequest(f"{what} contains a NUL character")

    def sandbox_id(self, value: str) -> str:
        if not value:
            raise InvalidRequest("sandbox_id is required")
        if not _ID.match(value):
            raise InvalidRequest(f"sandbox_id {value[:64]!r} is not a valid id")
        return value

    def template(self, value: str) -> str:
        value = value or "default"
        if len(value) > 128 or not _ID.match(value):
            raise InvalidRequest(f"template {value[:64]!r} is not a valid template name")
        return value

    def seconds(self, what: str, value: float, maximum: float) -> float | None:
        """A non-negative finite number of seconds at most `maximum`; 0 -> None (the default)."""
        if math.isnan(value) or math.isinf(value):
            raise InvalidRequest(f"{what} must be a finite number of seconds, got {value}")
        if value < 0:
            raise InvalidRequest(f"{what} must not be negative, got {value}")
        if value > maximum:
            raise InvalidRequest(f"{what} = {value:g}s is above the server's maximum of {maximum:g}s")
        return value or None

    def path(self, what: str, value: str, *, required: bool = True) -> str:
        if required and not value:
            raise InvalidRequest(f"{what} is required")
        if len(value) > self.b.max_path:
            raise InvalidRequest(f"{what} is longer than {self.b.max_path} characters")
        self._no_nul(what, value)
        return value

    def chunk_size(self, value: int) -> int:
        if value > self.b.max_chunk_size:
            raise InvalidRequest(f"chunk_size {value} is above the maximum of {self.b.max_chunk_size}")
        return value

    # -- maps --------------------------------------------------------------------------------

    def labels(self, labels: Mapping[str, str], *, what: str = "labels") -> dict[str, str]:
        if len(labels) > self.b.max_labels:
            raise InvalidRequest(f"too many {what}: {len(labels)} > {self.b.max_labels}")
        for k, v in labels.items():
            if not _LABEL_KEY.match(k):
                raise InvalidRequest(
                    f"{what} key {k[:64]!r} is invalid: 1-128 characters of [A-Za-z0-9._/-], "
                    "starting and ending with a letter or digit"
                )
            if len(v) > self.b.max_label_value:
                raise InvalidRequest(f"{what} value of {k!r} is longer than {self.b.max_label_value}")
            self._no_nul(f"{what} value of {k!r}", v)
        return dict(labels)

    def env(self, env: Mapping[str, str]) -> dict[str, str]:
        if len(env) > self.b.max_env:
            raise InvalidRequest(f"too many env variables: {len(env)} > {self.b.max_env}")
        for k, v in env.items():
            if not _ENV_KEY.match(k):
                raise InvalidRequest(
                    f"env name {k[:64]!r} is invalid: letters, digits and _, not starting with a digit"
                )
            self._no_nul(f"env value of {k}", v)
        return dict(env)

    def files(self, files: Iterable) -> list[tuple[str, bytes, int]]:
        out = []
        for f in files:
            self.path("file path", f.path)
            if f.mode > 0o7777:
                raise InvalidRequest(f"file mode {oct(f.mode)} of {f.path!r} is not a permission mode")
            out.append((f.path, f.data, f.mode))
        if len(out) > self.b.max_files:
            raise InvalidRequest(f"too many files: {len(out)} > {self.b.max_files}")
        return out

    # -- exec --------------------------------------------------------------------------------

    def argv(self, argv: Iterable[str]) -> list[str]:
        argv = list(argv)
        if not argv:
            raise InvalidRequest("argv is empty: give the program and its arguments")
        if not argv[0]:
            raise InvalidRequest("argv[0] (the program) is empty")
        if len(argv) > self.b.max_argv:
            raise InvalidRequest(f"argv has {len(argv)} arguments, more than {self.b.max_argv}")
        for i, a in enumerate(argv):
            self._no_nul(f"argv[{i}]", a)
        return argv

    def limits(self, m):
        """A pb.Limits -> `types.Limits` (None: all defaults), checked against the same ceilings
        as the embedded API (`types.Limits.validate`)."""
        if m is None:
            return None
        limits = limits_from_pb(m)
        if limits is not None:
            limits.validate()
        return limits
