"""The agent's readiness channel as a backend reads it (the agent writes it: `sandbox_exec::readiness`).

One byte `R` once the agent serves, or one failure record `F{step}\\n{message}` naming the start-up
step that failed (a `Step` value), written in one write of at most `MAX_RECORD` bytes so that it
arrives in one read. End-of-file without either: the agent died unreported (`Step.AGENT_START`).
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import LaunchError, Step

__all__ = ["MAX_RECORD", "READY", "launch_error"]

READY = b"R"
FAILED = b"F"
MAX_RECORD = 4096


def launch_error(data: bytes, where: str, unreported: Callable[[], str]) -> LaunchError | None:
    """None if `data` (what one read of the channel gave) says ready; else the `LaunchError` of
    the step the agent reported, or of `Step.AGENT_START` with `unreported()` (what the backend
    knows of an agent that died without a report). `where` names the sandbox in the message."""
    if data[:1] == READY:
        return None
    if data[:1] == FAILED:
        name, _, message = data[1:].decode(errors="replace").partition("\n")
        step = Step.parse(name)
        if step is not None:
            return LaunchError(
                f"{where}: start-up step {step.value!r} failed: {message}", detail=message, step=step
            )
        message = f"{message} (step {name!r})"
        return LaunchError(f"{where}: start-up failed: {message}", detail=message, step=Step.AGENT_START)
    text = unreported()
    return LaunchError(
        f"{where} exited or was killed before it was ready, without a report: {text}",
        detail=text,
        step=Step.AGENT_START,
    )
