"""Whether this host can snapshot a sandbox's processes and memory (CRIU), and if not, why: the
reason the calls that promise processes (e2b's full snapshot and fork) are refused with.

Probed once per process, at the first such call: `criu` on the PATH and its own `criu check`
(which fails on kernels whose vDSO it does not know, for example). A CRIU that passes its
check is reported as found; this server still restores files only, and says so.
"""

from __future__ import annotations

import functools
import shutil
import subprocess

__all__ = ["memory_snapshots_missing"]

CHECK_TIMEOUT_S = 30.0


@functools.cache
def memory_snapshots_missing() -> str:
    """Why memory snapshots cannot be served here, in words for the caller's error."""
    criu = shutil.which("criu")
    if criu is None:
        return "CRIU, which checkpoints running processes, is not installed on this host"
    try:
        r = subprocess.run(
            [criu, "check"], check=False, capture_output=True, text=True, timeout=CHECK_TIMEOUT_S
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"CRIU cannot run on this host ({e})"
    if r.returncode != 0:
        why = (r.stderr or r.stdout).strip().splitlines()
        return f"CRIU fails its own check on this host ({why[-1] if why else f'exit {r.returncode}'})"
    return "this server restores a sandbox's files, not its processes (CRIU is not used)"
