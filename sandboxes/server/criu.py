"""Whether this host can snapshot a sandbox's processes and memory (CRIU), and if not, why: the
server's Health shows it, and the calls that promise processes (e2b's full snapshot and fork) are
refused with it.

Probed once per process, at server start (in a thread: it runs `criu`): `criu` on the PATH, its
`criu --version` (4.1 or later: older releases fail on kernels that map `[vvar_vclock]`), its
own `criu check` and the preload installed beside it that enters CRIU into a sandbox's mount
namespace (`backends/memory.py`). `deploy/criu.sh` (`make criu`) installs one. A CRIU that passes is reported as
ok, and the local and docker backends' memory snapshots (`backends/memory.py`) are served with it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import threading
from dataclasses import dataclass

from ..backends.memory import mntns_preload

__all__ = ["MIN_VERSION", "Criu", "check", "memory_snapshots_missing", "parse_version", "probe", "probed"]

CHECK_TIMEOUT_S = 30.0
MIN_VERSION = (4, 1)
_NOT_INSTALLED = "CRIU, which checkpoints running processes, is not installed on this host"


@dataclass(frozen=True)
class Criu:
    """What the probe found: `found` a `criu` on the PATH, `version` its own ("" when unknown),
    `ok` it is `MIN_VERSION` or later and passes `criu check`; else `reason` says why not."""

    found: bool
    version: str
    ok: bool
    reason: str = ""

    @property
    def missing(self) -> str:
        """Why memory snapshots cannot be served here, in words for the caller's error ("" when
        they can)."""
        return "" if self.ok else self.reason


def parse_version(text: str) -> tuple[int, ...] | None:
    """The release of `criu --version`'s answer ("Version: 4.1.1" -> (4, 1, 1)), None without one."""
    m = re.search(r"^Version:\s*(\d+(?:\.\d+)*)", text, re.MULTILINE)
    return tuple(int(part) for part in m.group(1).split(".")) if m else None


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, check=False, capture_output=True, text=True, timeout=CHECK_TIMEOUT_S)


def _last_line(r: subprocess.CompletedProcess[str]) -> str:
    lines = (r.stderr or r.stdout).strip().splitlines()
    return lines[-1] if lines else f"exit {r.returncode}"


def check() -> Criu:
    """Probe the host's CRIU now (runs `criu`: call it off the event loop)."""
    criu = shutil.which("criu")
    if criu is None:
        return Criu(False, "", False, _NOT_INSTALLED)
    try:
        r = _run([criu, "--version"])
        release = parse_version(r.stdout)
        version = ".".join(map(str, release)) if release else ""
        if release is None:
            return Criu(True, "", False, f"CRIU at {criu} does not say its version ({_last_line(r)})")
        if release < MIN_VERSION:
            need = ".".join(map(str, MIN_VERSION))
            return Criu(
                True, version, False, f"CRIU {version} is older than {need}, which memory snapshots need"
            )
        r = _run([criu, "check"])
    except (OSError, subprocess.TimeoutExpired) as e:
        return Criu(True, "", False, f"CRIU cannot run on this host ({e})")
    if r.returncode != 0:
        return Criu(True, version, False, f"CRIU fails its own check on this host ({_last_line(r)})")
    if not (preload := mntns_preload(criu)).is_file():
        return Criu(
            True, version, False, f"{preload}, which enters CRIU into a sandbox, is missing (deploy/criu.sh)"
        )
    return Criu(True, version, True)


_lock = threading.Lock()
_answer: Criu | None = None


def probe() -> Criu:
    """The host's CRIU, probed once per process (threads that ask at once wait for one probe)."""
    global _answer
    with _lock:
        if _answer is None:
            _answer = check()
        return _answer


def probed() -> Criu | None:
    """The probe's answer if it has run, without running it (safe on the event loop)."""
    return _answer


def memory_snapshots_missing() -> str:
    """Why this host's CRIU cannot take memory snapshots, in words for the caller's error ("" when
    it can)."""
    return probe().missing
