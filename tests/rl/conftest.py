"""Fixtures of the rl/ tests: HumanEval subsets, a scripted stand-in model, and a private sandbox
runtime closed at the end of the test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import pytest_asyncio
from rl_helpers import N_HUMANEVAL
from sandboxes_rl.fake_llm import FakeChatServer
from sandboxes_rl.problems import problem_rows
from sandboxes_rl.runtime import SandboxRuntime

from sandboxes.datasets import load_humaneval, load_stdio


@pytest.fixture(scope="session")
def humaneval_subset() -> list[Any]:
    return load_humaneval()[:N_HUMANEVAL]


@pytest.fixture(scope="session")
def humaneval_rows() -> list[dict[str, Any]]:
    return problem_rows("humaneval", num_examples=N_HUMANEVAL)


@pytest.fixture(scope="session")
def stdio_subset() -> list[Any]:
    return [p for p in load_stdio() if "python" in p.references][:5]


@pytest_asyncio.fixture
async def fake_llm() -> AsyncIterator[Any]:
    """Factory: `await fake_llm(script, ttft_s=...)` starts a FakeChatServer stopped after the test."""
    servers: list[FakeChatServer] = []

    async def make(script: Any, **kwargs: Any) -> FakeChatServer:
        s = await FakeChatServer(script, **kwargs).start()
        servers.append(s)
        return s

    yield make
    for s in servers:
        await s.stop()


@pytest.fixture
def runtime(native: Any) -> Iterator[SandboxRuntime]:
    """A private runtime (its own loop thread, embedded local pool), closed after the test."""
    rt = SandboxRuntime(backend="local", warm=2, pool_kwargs={"claim_timeout": 60.0})
    yield rt
    rt.close()
