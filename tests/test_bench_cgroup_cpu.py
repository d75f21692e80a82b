"""The benchmarks' CPU scope (`bench/cgroup_cpu.py`): a fresh cgroup holding this process and what
it starts, counted apart from the machine, removed at the end."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench.cgroup_cpu import CpuScope, join

BURN = [sys.executable, "-c", "sum(range(2_000_000))"]


@pytest.mark.parametrize("prefer", ["v1", "v2"])
def test_a_scope_counts_its_children_and_goes_away(prefer: str) -> None:
    with CpuScope(prefer) as scope:
        if scope.dir is None:
            pytest.skip(scope.source)
        top = scope.dir
        with CpuScope() as inner:  # nested: the same cgroup
            assert inner.dir == top
        own = scope.dir.name
        assert own in Path("/proc/self/cgroup").read_text()
        before = scope.now()
        sub = scope.child("server")
        assert sub is not None
        sub_before = scope.cpu_s(sub)
        subprocess.run(BURN, check=True)
        after_child = scope.cpu_s(sub)
        subprocess.run(BURN, check=True, preexec_fn=lambda: join(sub))
        after = scope.now()
        assert after_child == sub_before  # the first child ran in the scope, not in `sub`
        assert scope.cpu_s(sub) > sub_before
        assert after.total - before.total > after.manager - before.manager
    assert own not in Path("/proc/self/cgroup").read_text()
    assert not top.exists()
