"""Validation of every request field, with messages that say what is wrong and what is allowed.

Everything here raises `InvalidRequest` (INVALID_ARGUMENT). An invalid request must never reach a
sandbox, so it can never kill one.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from sandboxes import languages
from sandboxes._proto.convert import case_from_pb, compare_from_pb, limits_from_pb
from sandboxes.errors import InvalidRequest
from sandboxes.grading import MAX_BATCH, MAX_BATCH_CASES, Grading
from sandboxes.judging import MAX_CASES, TestCase
from sandboxes.types import Limits

__all__ = ["Bounds", "RunTestsArgs", "Validator"]


_LABEL_KEY = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._/-]{0,126}[A-Za-z0-9])?$")
_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


@dataclass(frozen=True)
class Bounds:
    """What the server accepts; anything above is an absurd request, refused up front."""

    max_exec_timeout_s: float = 24 * 3600.0
    max_claim_timeout_s: float = 3600.0
    max_ttl_s: float = 7 * 24 * 3600.0
    # A sandbox paused this long is deleted (its memory is held on the host meanwhile).
    max_paused_s: float = 24 * 3600.0
    max_argv: int = 65536
    max_env: int = 4096
    max_labels: int = 64
    max_label_value: int = 256
    max_files: int = 10000
    max_path: int = 4096
    max_chunk_size: int = 16 << 20
    max_tests: int = MAX_CASES  # test cases of one RunTests (the agent's own ceiling)
    max_source_bytes: int = 16 << 20
    max_excerpt_bytes: int = 1 << 20
    # Worst case of one RunTests: cases x per-case wall limit (when the call sets one).
    max_run_tests_s: float = 24 * 3600.0


@dataclass(frozen=True)
class RunTestsArgs:
    """A validated RunTests request: the arguments of `SandboxBase.run_tests`."""

    language: str
    source: str
    tests: list[TestCase]
    limits: Limits | None
    stop_on_first_failure: bool
    compare: str
    float_tolerance: float | None
    excerpt_bytes: int  # 0: the default

    def grading(self) -> Grading:
        """This request as one submission of a batch."""
        return Grading(
            self.source,
            self.tests,
            language=self.language,
            limits=self.limits,
            stop_on_first_failure=self.stop_on_first_failure,
            compare=self.compare,
            float_tolerance=self.float_tolerance,
        )


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
        """A cpb.Limits -> `types.Limits` (None: all defaults), checked against the same ceilings
        as the embedded API (`types.Limits.validate`)."""
        if m is None:
            return None
        limits = limits_from_pb(m)
        if limits is not None:
            limits.validate()
        return limits

    # -- run_tests ---------------------------------------------------------------------------

    def language(self, value: str) -> str:
        """The judge's canonical name of a language (aliases such as "py" or "c++" accepted)."""
        self._no_nul("language", value)
        return languages.require(value).name

    def run_tests_batch(self, req) -> list[RunTestsArgs]:
        """A pb.RunTestsBatchRequest -> one `RunTestsArgs` per submission; an error names the
        submission."""
        n = len(req.submissions)
        if n == 0:
            raise InvalidRequest("no submissions")
        if n > MAX_BATCH:
            raise InvalidRequest(f"{n} submissions, more than the maximum of {MAX_BATCH}")
        if req.parallelism > MAX_BATCH:
            raise InvalidRequest(f"parallelism {req.parallelism} is above the maximum of {MAX_BATCH}")
        out = []
        for i, sub in enumerate(req.submissions):
            try:
                out.append(self.run_tests(sub))
            except InvalidRequest as e:
                raise InvalidRequest(f"submission {i}: {e.message}") from None
        cases = sum(len(a.tests) for a in out)
        if cases > MAX_BATCH_CASES:
            raise InvalidRequest(
                f"{cases} test cases in the batch, more than the maximum of {MAX_BATCH_CASES}"
            )
        return out

    def run_tests(self, req) -> RunTestsArgs:
        """A pb.RunTestsRequest -> `RunTestsArgs`; the agent is never asked to judge a request it
        would refuse (or one that would tie a sandbox up for days)."""
        b = self.b
        if not req.language:
            raise InvalidRequest("language is required")
        language = self.language(req.language)
        if not req.source.strip():
            raise InvalidRequest("source is empty")
        if len(req.source) > b.max_source_bytes:
            raise InvalidRequest(f"source is longer than {b.max_source_bytes} characters")
        n = len(req.tests)
        if n == 0:
            raise InvalidRequest("no test cases")
        if n > b.max_tests:
            raise InvalidRequest(f"{n} test cases, more than the maximum of {b.max_tests}")
        tests = []
        for i, t in enumerate(req.tests):
            if t.check and t.expected_output:
                raise InvalidRequest(f"test case {i} has both expected_output and check; give one")
            lang = languages.by_name(language)
            if t.check and not (lang and lang.checks):
                takes = sorted(x.name for x in languages.table() if x.checks)
                raise InvalidRequest(
                    f"test case {i} has a check script; check scripts are supported for "
                    f"{' and '.join(takes)}, not {language}"
                )
            try:
                tests.append(case_from_pb(t))
            except InvalidRequest as e:
                raise InvalidRequest(f"test case {i}: {e.message}") from None
        limits = self.limits(req.limits) if req.HasField("limits") else None
        if limits is not None and limits.wall_time_s and n * limits.wall_time_s > b.max_run_tests_s:
            raise InvalidRequest(
                f"{n} cases x limits.wall_time_s {limits.wall_time_s:g}s is above the server's "
                f"maximum of {b.max_run_tests_s:g}s for one RunTests"
            )
        compare = compare_from_pb(req.compare)
        if compare is None:
            raise InvalidRequest(f"compare {req.compare} is not a Compare value")
        tol = req.float_tolerance
        if math.isnan(tol) or math.isinf(tol) or tol < 0:
            raise InvalidRequest(f"float_tolerance must be finite and >= 0, got {tol}")
        if req.excerpt_bytes > b.max_excerpt_bytes:
            raise InvalidRequest(
                f"excerpt_bytes {req.excerpt_bytes} is above the maximum of {b.max_excerpt_bytes}"
            )
        return RunTestsArgs(
            language=language,
            source=req.source,
            tests=tests,
            limits=limits,
            stop_on_first_failure=req.stop_on_first_failure,
            compare=compare,
            float_tolerance=tol or None,
            excerpt_bytes=req.excerpt_bytes,
        )
