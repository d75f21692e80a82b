"""A shell on a pseudo-terminal, driven as a terminal emulator drives it: the scenario the terminal
tests run on every backend and surface."""

from __future__ import annotations

import asyncio

import sandboxes
from sandboxes.sandbox import ExecStream, SandboxBase

WAIT_S = 30.0


class Screen:
    """What a terminal showed so far, read from an `ExecStream` started with a terminal."""

    def __init__(self, stream: ExecStream) -> None:
        self.stream = stream
        self.out = bytearray()
        self.result: sandboxes.ExecResult | None = None

    async def until(self, text: str) -> str:
        """Reads until `text` has been shown (after what was seen before); all output so far."""
        start = len(self.out)
        while text.encode() not in self.out[start:]:
            ev = await asyncio.wait_for(self.stream.__anext__(), WAIT_S)
            if ev.kind == "stdout":
                self.out += ev.data
            elif ev.kind == "stderr":
                raise AssertionError(f"stderr on a terminal: {ev.data!r}")
            elif ev.kind == "exit":
                raise AssertionError(f"exited before {text!r}: {ev.result}; shown {bytes(self.out)!r}")
        return self.out.decode(errors="replace")

    async def end(self) -> sandboxes.ExecResult:
        async for ev in self.stream:
            if ev.kind == "stdout":
                self.out += ev.data
            elif ev.kind == "exit":
                self.result = ev.result
        assert self.result is not None
        return self.result


async def drive_bash(sb: SandboxBase) -> None:
    """A shell with job control on a 24x80 terminal: a command, a resize seen by `stty size` and
    by a foreground job's SIGWINCH, Ctrl-C interrupting `sleep`, a background job, exit status.
    Expected text is computed by the shell (`$((...))`), so the terminal's echo of the typed
    command never matches it."""
    async with sb.exec_stream(
        ["bash", "--norc", "--noprofile", "-i"], env={"PS1": "$ ", "TERM": "xterm"}, terminal=(24, 80)
    ) as stream:
        screen = Screen(stream)
        await stream.send_stdin("echo ready-$((20+1)); stty size\n")
        assert "ready-21\r\n24 80\r\n" in await screen.until("24 80\r\n")

        await stream.resize(40, 120)
        await stream.send_stdin("stty size\n")
        await screen.until("40 120\r\n")

        # A foreground job of its own process group sees the resize as SIGWINCH.
        await stream.send_stdin(
            'sh -c \'trap "echo winch-$((6*7)); stty size; exit" WINCH; echo armed-$((1+1)); '
            "while :; do sleep 0.05; done'\n"
        )
        await screen.until("armed-2\r\n")
        await stream.resize(50, 132)
        await screen.until("winch-42\r\n50 132\r\n")

        # Ctrl-C interrupts the foreground job, not the shell.
        await stream.send_stdin("sleep 600; echo not-$((1+1))-interrupted\n")
        await asyncio.sleep(0.3)
        await stream.send_stdin("\x03")
        await stream.send_stdin("echo alive-$((40+2))\n")
        shown = await screen.until("alive-42\r\n")
        assert "not-2-interrupted" not in shown

        # Job control: a background job is listed, then killed by its job number.
        await stream.send_stdin("sleep 600 &\n")
        await stream.send_stdin("jobs; kill %1; wait; echo jobs-done-$((2+3))\n")
        shown = await screen.until("jobs-done-5\r\n")
        assert "Running" in shown and "sleep 600" in shown

        await stream.send_stdin("exit 3\n")
        result = await screen.end()
    assert result.exit_code == 3, result
