"""`POST /api/v1/sandbox/background-jobs/status:batchGet`: the state of many background jobs at once.

A job is what the SDK's `start_background_job` launched in the sandbox: a detached shell that
records its pid in `/tmp/job_<id>.launch/pid` and, when the command ends, its exit code in
`/tmp/job_<id>.exit`. The server reads those with one short command per sandbox (all of a
sandbox's jobs together), so a client polling hundreds of jobs makes one request.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from typing import Any

from sandboxes import errors as E
from sandboxes.server.http.prime.requests import MAX_BATCH

__all__ = ["statuses"]

_JOB_ID = re.compile(r"^[0-9A-Fa-f]{8}$")
STATUS_TIMEOUT_S = 30.0

# Per job id argument: its exit code, "running", or "lost" (no exit code and its launcher's pid
# no longer runs the job: it died without recording one). The exit file is read again after the
# liveness check, since a job writes it just before exiting.
_SCRIPT = r"""
for id in "$@"; do
  f=/tmp/job_$id.exit
  if [ -s "$f" ]; then echo "$id $(head -c 32 "$f")"; continue; fi
  pid=$(cat /tmp/job_$id.launch/pid 2>/dev/null)
  if [ -n "$pid" ] && grep -qsF "$f" "/proc/$pid/cmdline"; then echo "$id running"; continue; fi
  if [ -s "$f" ]; then echo "$id $(head -c 32 "$f")"; else echo "$id lost"; fi
done
"""


async def statuses(wanted: Any, lookup: Callable[[str], Awaitable[Any]]) -> dict[str, Any]:
    """The batch answer for `wanted` (`[{sandbox_id, job_id}]`); `lookup(id)` gives a charged
    session of the caller's record (`ServerCore.session`) or raises `NotFound`."""
    if not isinstance(wanted, list) or not wanted or len(wanted) > MAX_BATCH:
        raise E.InvalidRequest(f"jobs must be a list of 1 to {MAX_BATCH} jobs")
    by_sandbox: dict[str, list[str]] = {}
    for job in wanted:
        sid, jid = (job.get("sandbox_id"), job.get("job_id")) if isinstance(job, dict) else (None, None)
        if not isinstance(sid, str) or not isinstance(jid, str) or not _JOB_ID.match(jid):
            raise E.InvalidRequest("each job needs a sandbox_id and an 8-hex-digit job_id")
        by_sandbox.setdefault(sid, []).append(jid)
    found: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []

    async def one(sid: str, ids: list[str]) -> None:
        def fail(code: str, message: str) -> None:
            errors.extend({"sandbox_id": sid, "job_id": j, "code": code, "message": message} for j in ids)

        try:
            session = await lookup(sid)
        except E.NotFound:
            return fail("NOT_FOUND", f"Sandbox {sid} not found")
        try:
            r = await session.exec(["/bin/sh", "-c", _SCRIPT, "sh", *ids], timeout=STATUS_TIMEOUT_S)
        except E.QuotaExceeded:
            raise  # the key's, not the job's: the whole batch is refused
        except E.SandboxError as e:
            return fail("NOT_RUNNING", f"{e.kind.value}: {e.message}")
        if r.exit_code != 0:
            return fail("RUNTIME_ERROR", r.stderr.decode("utf-8", "replace")[-500:])
        states = dict(
            line.split(" ", 1) for line in r.stdout.decode("utf-8", "replace").splitlines() if " " in line
        )
        for jid in ids:
            state = states.get(jid, "lost")
            if state == "lost":
                errors.append(
                    {
                        "sandbox_id": sid,
                        "job_id": jid,
                        "code": "RUNTIME_ERROR",
                        "message": f"background job {jid} exited without recording an exit code",
                    }
                )
            elif state == "running":
                found.append({"sandbox_id": sid, "job_id": jid, "completed": False, "exit_code": None})
            else:
                try:
                    code = int(state.strip())
                except ValueError:
                    code = 1
                found.append({"sandbox_id": sid, "job_id": jid, "completed": True, "exit_code": code})

    await asyncio.gather(*(one(sid, ids) for sid, ids in by_sandbox.items()))
    return {"statuses": found, "errors": errors}
