"""The native boundary: error translation, limit conversion, agent lookup (no agent needed)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from sandboxes import _bridge, errors
from sandboxes.types import Limits


class FakeNativeError(Exception):
    def __init__(self, kind: str, detail: str = "", step: str = "") -> None:
        super().__init__(kind, detail, step)
        self.kind, self.detail, self.step = kind, detail, step


@pytest.mark.parametrize(
    ("kind", "detail", "expected"),
    [
        ("sandbox_lost", "connection refused", errors.SandboxLost),
        ("invalid_request", "empty argv", errors.InvalidRequest),
        ("invalid_request", "forked child", errors.InvalidRequest),
        ("not_found", "no such file", errors.NotFound),
        ("auth", "outside the sandbox", errors.AuthError),
        ("auth", "bad token", errors.AuthError),
        ("timeout", "deadline", errors.SandboxTimeout),
        ("too_large", "request too large", errors.TooLarge),
        ("no_space", "No space left on device", errors.NoSpace),
        ("cancelled", "", errors.Cancelled),
        ("internal", "boom", errors.SandboxError),
        ("something_new", "?", errors.SandboxError),
    ],
)
def test_translate(kind: str, detail: str, expected: type) -> None:
    e = _bridge.translate(FakeNativeError(kind, detail))
    assert type(e) is expected
    assert e.detail == detail or not detail


def test_the_kind_decides_not_the_message() -> None:
    """A message that reads like another kind does not change the class (no text guessing)."""
    assert type(_bridge.translate(FakeNativeError("too_large", "No space left on device"))) is errors.TooLarge
    assert type(_bridge.translate(FakeNativeError("no_space", "file too large"))) is errors.NoSpace
    assert not errors.NoSpace.retryable and not errors.TooLarge.retryable


def test_translate_launch_keeps_the_step() -> None:
    e = _bridge.translate(FakeNativeError("launch", "EPERM", "clone"))
    assert isinstance(e, errors.LaunchError) and e.step == "clone"
    assert "clone" in str(e)


def test_limits_validation() -> None:
    Limits(wall_time_s=1.5, memory_bytes=64 << 20).validate()
    for bad in (
        Limits(wall_time_s=-1),
        Limits(wall_time_s=float("inf")),
        Limits(memory_bytes=1 << 50),
        Limits(max_pids=True),  # type: ignore[arg-type]
    ):
        with pytest.raises(errors.InvalidRequest):
            bad.validate()


def test_agent_path_from_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    agent = tmp_path / "sandbox-agent"
    agent.write_text("#!/bin/sh\n")
    agent.chmod(agent.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv(_bridge.AGENT_BIN_ENV, str(agent))
    assert _bridge.agent_path() == str(agent.resolve())
    monkeypatch.setenv(_bridge.AGENT_BIN_ENV, str(tmp_path / "missing"))
    with pytest.raises(errors.LaunchError) as e:
        _bridge.agent_path()
    assert e.value.step == "agent_path" and os.fspath(tmp_path) in str(e.value)


class ExecStream:  # named as the native type whose instances `Translated` wraps
    def __init__(self, native) -> None:
        self.native, self.pid = native, 7

    async def next(self):
        raise self.native.NativeError("sandbox_lost", "agent gone", "")


class FakeClient:
    def __init__(self, native) -> None:
        self.native = native

    def fails_now(self):
        raise self.native.NativeError("invalid_request", "empty argv", "")

    async def fails_later(self):
        raise self.native.NativeError("too_large", "over the bound", "")

    def stream(self):
        return ExecStream(self.native)

    def plain(self):
        raise KeyError("not a native error")


async def test_translated_turns_every_native_error_into_its_type(native) -> None:
    client = _bridge.Translated(FakeClient(native))
    with pytest.raises(errors.InvalidRequest, match="empty argv"):
        client.fails_now()
    with pytest.raises(errors.TooLarge, match="over the bound"):
        await client.fails_later()
    stream = client.stream()
    assert isinstance(stream, _bridge.Translated) and stream.pid == 7
    with pytest.raises(errors.SandboxLost):
        await stream.next()
    with pytest.raises(KeyError):
        client.plain()
    with pytest.raises(errors.InvalidRequest):  # the real module: a bad launch config
        _bridge.api().LaunchConfig("/bin/true", "/tmp/x", python_zygote="sometimes")
