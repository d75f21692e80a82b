"""Sandboxes' Python zygotes made from the local backend's template process
(`sandboxes/backends/python_template.py`, `sandbox_exec::template`), through the real agent: a
sandbox's first Python run is a fork of a prewarmed interpreter, with exactly a spawned program's
isolation, and nothing of the template or of another sandbox reaches it; the template is out of
every sandbox's reach, replaced after its bound, and leaves nothing behind. Checked from inside
(as the sandbox's user and as root) and from the host."""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path

import pytest
from helpers import wait_until

from sandboxes import Limits, Template
from sandboxes.backends import python_template

ROOT = Template(name="root", user="root")
# Loaded by the zygote before it serves, not by a started interpreter: which way a run went.
FORKED = "import sys; print('statistics' in sys.modules)"
# Everything of a program's start a fork must reproduce, as the program sees it.
STATE = r"""
import os, re, resource, signal
st = dict(l.split(':', 1) for l in open('/proc/self/status').read().splitlines())
print(os.getuid(), os.geteuid(), os.getgid(), os.getegid(), sorted(os.getgroups()), os.getppid())
print([st[k].strip() for k in ('CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb', 'NoNewPrivs', 'Seccomp')])
print(os.getcwd(), oct(os.umask(0o22)), sorted(os.environ.items()))
print([resource.getrlimit(getattr(resource, r)) for r in sorted(dir(resource)) if r.startswith('RLIMIT_')])
print([str(signal.getsignal(s)) for s in range(1, signal.NSIG) if s not in (9, 19, 32, 33)])
print(sorted(os.listdir('/proc/self/fd')), open('/proc/self/oom_score_adj').read().strip())
print(re.sub(r'exec-[0-9]+-p?[0-9]+', 'exec', open('/proc/self/cgroup').read()))
print(os.getsid(0) == os.getpid(), os.getpgid(0) == os.getpid())
print(sorted(os.listdir('/proc/self/ns')), [os.readlink('/proc/self/ns/' + n) for n in ('net', 'mnt', 'pid', 'user')])
"""

pytestmark = [
    pytest.mark.asyncio,
    pytest.mark.requires("root", reason="zygotes are made from a template for a root manager's sandboxes"),
]


def templates_of(pool) -> python_template.PythonTemplates:
    return pool._tps[next(iter(pool._tps))].backend._python_templates


def template_pid(pool) -> int:
    current = templates_of(pool)._current
    assert current is not None, "no template process"
    return current.proc.pid


async def py(sb, code: str, *flags: str) -> str:
    r = await sb.exec(["python3", *flags, "-c", code])
    assert r.exit_code == 0, r.stderr
    return r.stdout.decode()


@pytest.mark.parametrize("template", [Template(name="default"), ROOT], ids=["sandbox user", "root"])
async def test_python_runs_made_from_the_template_have_a_spawned_programs_isolation(
    make_pool, template
) -> None:
    pool = await make_pool(templates={template.name: template}, warm=1)
    async with pool.sandbox(template.name) as sb:
        agent = sb.handle.backend_data.pid

        def pythons() -> list[int]:
            children = [
                int(p)
                for t in Path(f"/proc/{agent}/task").iterdir()
                for p in (t / "children").read_text().split()
            ]
            return [p for p in children if Path(f"/proc/{p}/comm").read_text().startswith("python3")]

        # The first run: a process the template made, which ran it in place of serving.
        first = await sb.exec(["python3", "-c", STATE])
        assert first.path == "zygote" and first.exit_code == 0, first
        placed = first.stdout.decode()
        assert pythons() == [], "no zygote after the first run"
        # The second: a worker of the zygote the template made.
        assert await py(sb, FORKED) == "True\n"
        forked = await py(sb, STATE)
        spawned = await py(sb, STATE, "-S")  # -S: never the zygote's
        assert await py(sb, FORKED, "-S") == "False\n"
        # From the host: the zygote is the agent's child, in the agent's cgroup in every hierarchy
        # (the freezer that pauses the sandbox, the cpu controller's share) but where its own is.
        [zygote] = pythons()
        theirs = Path(f"/proc/{agent}/cgroup").read_text().splitlines()
        for mine, its in zip(Path(f"/proc/{zygote}/cgroup").read_text().splitlines(), theirs, strict=True):
            assert mine == its or re.fullmatch(re.escape(its).rstrip("/") + r"/zygote-[0-9]+-[0-9]+", mine), (
                mine,
                its,
            )
    assert placed == forked == spawned
    caps = forked.splitlines()[1]
    if template.user == "root":
        assert "'0000000000000000'" not in caps.split(",")[2], caps  # root keeps its capabilities
    else:
        assert caps.startswith("['0000000000000000', '0000000000000000', '0000000000000000'"), caps
    assert "'1', '2']" in caps, "no_new_privs and the filter"


async def test_sandboxes_from_one_template_share_no_random_state(make_pool) -> None:
    pool = await make_pool(warm=2)
    code = "import os, random; print(random.random(), random.getrandbits(64), os.urandom(16).hex())"
    async with pool.sandbox() as a, pool.sandbox() as b:
        ra, rb = await py(a, code), await py(b, code)
        assert await py(a, FORKED) == await py(b, FORKED) == "True\n"
    for x, y in zip(ra.split(), rb.split(), strict=True):
        assert x != y


async def test_the_template_holds_nothing_of_a_sandbox_and_is_out_of_its_reach(make_pool) -> None:
    pool = await make_pool(templates={"root": ROOT}, warm=2)
    async with pool.sandbox("root") as a, pool.sandbox("root") as b:
        assert await py(a, FORKED) == "True\n"
        tpid = template_pid(pool)
        # From the host: no environment, and no fd but its stdio (this process's), its own
        # sockets, pipe and epoll, and its own pid namespace, which is again the one its children
        # are made in (it enters an agent's only to fork there).
        assert Path(f"/proc/{tpid}/environ").read_bytes() == b""
        fds = [int(fd) for fd in os.listdir(f"/proc/{tpid}/fd")]
        links = [os.readlink(f"/proc/{tpid}/fd/{fd}") for fd in fds if fd > 2]
        own = os.readlink(f"/proc/{tpid}/ns/pid")
        assert os.readlink(f"/proc/{tpid}/ns/pid_for_children") == own
        assert all(re.match(r"(socket|pipe|anon_inode):", link) or link == own for link in links), links
        assert Path(f"/proc/{tpid}/status").read_text().count("\nUid:\t0\t") == 1
        # Outside every sandbox's pid namespace: nothing in one can see, trace or signal it.
        agent = a.handle.backend_data.pid
        assert os.readlink(f"/proc/{tpid}/ns/pid") != os.readlink(f"/proc/{agent}/ns/pid")
        hit = await a.exec(["sh", "-c", "kill -9 -1; sleep 0.2; echo survived"])
        assert hit.exit_code != 0 or b"survived" in hit.stdout
        assert Path(f"/proc/{tpid}").exists(), "the template survives a sandbox's kill -9 -1"
        assert await py(b, FORKED) == "True\n", "a sibling's zygote survives it too"


async def test_a_template_is_replaced_after_its_bound_and_ends_with_its_sandboxes(
    make_pool, monkeypatch
) -> None:
    monkeypatch.setattr(python_template, "MAX_SANDBOXES", 2)
    pool = await make_pool(warm=0)
    held, pids = [], []
    for _ in range(3):
        sb = await pool.claim()
        held.append(sb)
        assert await py(sb, FORKED) == "True\n"
        pids.append(template_pid(pool))
    assert pids[0] == pids[1] != pids[2]
    first = templates_of(pool)._retired[0]
    assert not first.path.exists(), "a retired template takes no new sandbox"
    await asyncio.sleep(1.5)
    assert first.proc.returncode is None, "it serves the sandboxes it has"
    for sb in held[:2]:
        await sb.close()
    await wait_until(lambda: first.proc.returncode is not None, what="the retired template to end")
    await held[2].close()
    last = templates_of(pool)._current
    await pool.close()
    assert last is not None and last.proc.returncode is not None
    assert not any(p.name.startswith("python-template") for p in last.path.parent.glob("*"))


async def test_a_first_python_run_made_in_place_is_held_to_a_pids_limit_of_one(make_pool) -> None:
    """A run made in place is born outside its exec's cgroup and joins it alone (the template's
    middle process never enters it): under a pids limit of one it is still made in place, and
    the limit holds it, its own fork refused."""
    pool = await make_pool(warm=1)
    fork = "import os\ntry:\n    os.fork()\nexcept BlockingIOError:\n    print('refused')"
    async with pool.sandbox() as sb:
        agent = sb.handle.backend_data.pid
        r = await sb.exec(["python3", "-c", fork], limits=Limits(max_pids=1))
        assert (r.exit_code, r.stdout, r.path) == (0, b"refused\n", "zygote"), r
        children = [
            p for t in Path(f"/proc/{agent}/task").iterdir() for p in (t / "children").read_text().split()
        ]
        assert not [p for p in children if Path(f"/proc/{p}/comm").read_text().startswith("python3")], (
            "no zygote"
        )
