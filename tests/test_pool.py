"""The pool manager against real local sandboxes: claims, waits, fairness, refills, leases, cleanup."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import sys
import textwrap
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import cgroup_exists, pgrep, pid_running, wait_until

import sandboxes
from sandboxes import Limits, Pool
from sandboxes.backends import ids, python_template, rundirs
from sandboxes.backends import local as local_backend

pytestmark = pytest.mark.asyncio

MakePool = Callable[..., Awaitable[Pool]]


def stat(pool: Pool, key: str, template: str = "default") -> Any:
    return pool.stats()[template][key]


async def test_claim_exec_release(pool: Pool) -> None:
    sb = await pool.claim()
    assert isinstance(sb, sandboxes.Sandbox) and sb.template == "default"
    assert stat(pool, "claimed") == 1
    r = await sb.exec(["echo", "ok"])
    assert r.stdout == b"ok\n"
    await pool.release(sb)
    assert stat(pool, "claimed") == 0
    assert stat(pool, "destroyed_total") >= 1
    with pytest.raises(sandboxes.SandboxLost):
        await sb.exec(["true"])
    await sb.close()  # idempotent


async def test_per_claim_env_and_files(pool: Pool) -> None:
    async with pool.sandbox(env={"ANSWER": "42"}, files={"in/x.txt": b"payload"}, labels={"run": "t1"}) as sb:
        assert sb.labels["run"] == "t1"
        r = await sb.exec("echo $ANSWER; cat in/x.txt")
        assert r.stdout == b"42\npayload", r.stderr
        # A per-call env overrides the claim's without dropping it.
        r = await sb.exec("echo $ANSWER $OTHER", env={"OTHER": "o"})
        assert r.stdout == b"42 o\n"
    async with pool.sandbox() as other:
        assert (await other.exec("echo ${ANSWER:-unset}")).stdout == b"unset\n"


async def test_claim_while_empty_waits_for_a_create(make_pool: MakePool) -> None:
    pool = await make_pool(warm=0)
    assert stat(pool, "warm") == 0
    async with pool.sandbox(timeout=60) as sb:
        assert (await sb.exec(["true"])).exit_code == 0
    assert stat(pool, "created_total") == 1


async def test_claim_waits_for_capacity_then_succeeds(make_pool: MakePool) -> None:
    pool = await make_pool(warm=1, max_size=1)
    first = await pool.claim()
    waiter = asyncio.create_task(pool.claim(timeout=60))
    await wait_until(lambda: stat(pool, "waiting") == 1, what="the claim to wait")
    assert not waiter.done()
    await first.close()
    second = await waiter
    assert (await second.exec(["true"])).exit_code == 0
    await second.close()


async def test_pool_exhausted_after_the_wait(make_pool: MakePool) -> None:
    pool = await make_pool(warm=1, max_size=1)
    held = await pool.claim()
    with pytest.raises(sandboxes.PoolExhausted):
        await pool.claim(timeout=0.2)
    assert stat(pool, "claim_timeouts_total") == 1
    assert stat(pool, "waiting") == 0
    await held.close()
    async with pool.sandbox() as sb:  # the pool still works
        assert (await sb.exec(["true"])).exit_code == 0


async def test_waiting_claims_are_served_in_order(make_pool: MakePool) -> None:
    pool = await make_pool(warm=1, max_size=1)
    held = await pool.claim()
    order: list[str] = []

    async def claim(name: str) -> sandboxes.Sandbox:
        sb = await pool.claim(timeout=60)
        order.append(name)
        return sb

    a = asyncio.create_task(claim("a"))
    await wait_until(lambda: stat(pool, "waiting") == 1, what="a to wait")
    b = asyncio.create_task(claim("b"))
    await wait_until(lambda: stat(pool, "waiting") == 2, what="b to wait")
    c = asyncio.create_task(claim("c"))
    await wait_until(lambda: stat(pool, "waiting") == 3, what="c to wait")
    await held.close()
    sa = await a
    assert order == ["a"] and not b.done() and not c.done()
    await sa.close()
    sb_ = await b
    assert order == ["a", "b"] and not c.done()
    await sb_.close()
    await (await c).close()
    assert order == ["a", "b", "c"]


async def test_cancelled_waiter_does_not_lose_a_sandbox(make_pool: MakePool) -> None:
    pool = await make_pool(warm=1, max_size=1)
    held = await pool.claim()
    gone = asyncio.create_task(pool.claim(timeout=60))
    await wait_until(lambda: stat(pool, "waiting") == 1, what="the claim to wait")
    gone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gone
    assert stat(pool, "waiting") == 0
    await held.close()
    async with pool.sandbox(timeout=60) as sb:
        assert (await sb.exec(["true"])).exit_code == 0


async def test_fifty_concurrent_claims(make_pool: MakePool) -> None:
    pool = await make_pool(warm=4, max_size=16)

    async def one(i: int) -> bytes:
        async with pool.sandbox(env={"I": str(i)}, timeout=120) as sb:
            return (await sb.exec("echo $I")).stdout

    outs = await asyncio.gather(*(one(i) for i in range(50)))
    assert outs == [f"{i}\n".encode() for i in range(50)]
    s = pool.stats()["default"]
    assert s["claims_total"] == 50 and s["claimed"] == 0
    assert s["claim_wait_seconds"]["count"] == 50


async def test_warm_set_is_refilled_after_claims(make_pool: MakePool) -> None:
    pool = await make_pool(warm=3)
    await wait_until(lambda: stat(pool, "warm") == 3, what="the warm set to fill")
    a, b = await pool.claim(), await pool.claim()
    await wait_until(lambda: stat(pool, "warm") == 3, what="the warm set to refill")
    assert stat(pool, "created_total") == 5
    await a.close()
    await b.close()


async def test_lease_renewal_keeps_sandboxes_alive(make_pool: MakePool) -> None:
    ttl = 1.5
    pool = await make_pool(warm=1, lease_ttl_s=ttl)
    sb = await pool.claim()

    async def lived_three_ttls() -> bool:
        return (await sb.info()).uptime_s > 3 * ttl

    await wait_until(lived_three_ttls, timeout=60, interval=0.1, what="three lease TTLs to pass")
    assert (await sb.exec(["echo", "still here"])).stdout == b"still here\n"
    await wait_until(lambda: stat(pool, "warm") == 1, what="a warm sandbox")
    assert stat(pool, "lost_total") == 0
    assert stat(pool, "renewals_total") >= 6
    await sb.close()


async def test_lost_warm_sandbox_is_replaced(make_pool: MakePool) -> None:
    pool = await make_pool(warm=1, lease_ttl_s=1.5)
    await wait_until(lambda: stat(pool, "warm") == 1, what="a warm sandbox")
    victim = pool._tps["default"].warm[0]
    os.kill(victim.handle.backend_data.pid, 9)
    await wait_until(lambda: stat(pool, "lost_total") == 1, what="the loss to be noticed")
    await wait_until(
        lambda: stat(pool, "warm") == 1 and stat(pool, "created_total") == 2, what="the replacement"
    )
    async with pool.sandbox() as sb:
        assert sb.id != victim.id
        assert (await sb.exec(["true"])).exit_code == 0


async def test_destroy_leaves_nothing(make_pool: MakePool) -> None:
    pool = await make_pool(warm=1)
    sb = await pool.claim()
    local = sb.handle.backend_data
    pid, cgroup, run_dir = local.pid, local.cgroup, local.run_dir
    assert pid_running(pid) and os.path.isdir(run_dir)
    await sb.close()
    assert not pid_running(pid)
    assert not os.path.exists(run_dir)
    assert not cgroup or not cgroup_exists(cgroup)
    pool_dir = Path(run_dir).parent
    await pool.close()
    assert not pool_dir.exists()


async def test_the_agent_and_its_programs_are_in_the_sandbox_cgroup_everywhere(make_pool: MakePool) -> None:
    """The launcher has the agent's process join its sandbox cgroup in every hierarchy before it
    execs (on cgroup v1 by itself, through `tasks`; on v2 the launcher moves it), and everything
    the agent starts stays beneath. Read from the host's /proc."""
    pool = await make_pool(warm=1)
    async with pool.sandbox() as sb:
        local = sb.handle.backend_data
        if not local.cgroup:
            pytest.skip("no usable cgroup hierarchy here")
        name = Path(local.run_dir).name
        mark = f"{86000 + os.getpid() % 300}.{secrets.randbelow(10**9):09d}"
        stream = sb.exec_stream(["sleep", mark])
        await anext(stream)  # started
        agent = Path(f"/proc/{local.pid}/cgroup").read_text().splitlines()
        (program_pid,) = pgrep(f"sleep {mark}")
        program = Path(f"/proc/{program_pid}/cgroup").read_text().splitlines()
        stream.cancel()

    def paths(lines: list[str]) -> dict[str, str]:
        """controllers -> path of the hierarchies the launcher uses: the v1 ones of memory, pids
        and cpu where any is mounted, else the v2 one ("")."""
        rows = [line.split(":", 2)[1:] for line in lines]
        v1 = {c: p for c, p in rows if {"memory", "pids", "cpu"} & set(c.split(","))}
        return v1 or {c: p for c, p in rows if c == ""}

    agent_paths, program_paths = paths(agent), paths(program)
    assert agent_paths
    for k, p in agent_paths.items():
        assert p.rstrip("/").endswith(f"/sandboxes/{name}"), (k, p)
        # the sandbox's own cgroup, or the per-exec one the agent made beneath it
        assert (program_paths[k] + "/").startswith(p.rstrip("/") + "/"), (k, program_paths[k], p)


async def test_sandbox_cgroups_follow_the_manager_into_another_cgroup(make_pool: MakePool) -> None:
    """A sandbox's cgroup is made under the manager's own cgroup as it is at that create (the
    launcher keeps its discovery of the hierarchies only while the manager stays where it is): a
    manager moved into another cgroup (here the benchmarks' CPU scope) makes the next sandbox's
    there, and back where it was once it has left. Read from the host's /proc."""
    from bench.cgroup_cpu import CpuScope

    pool = await make_pool(warm=0)

    async def paths() -> list[str]:
        async with pool.sandbox() as sb:
            local = sb.handle.backend_data
            if not local.cgroup:
                pytest.skip("no usable cgroup hierarchy here")
            lines = Path(f"/proc/{local.pid}/cgroup").read_text().splitlines()
            return [line.split(":", 2)[2] for line in lines]

    first = await paths()
    with CpuScope() as scope:
        if scope.dir is None:
            pytest.skip(scope.source)
        mark = f"/{scope.dir.name}/sandboxes/"
        inside = await paths()
    after = await paths()
    assert any(mark in p for p in inside), (mark, inside)
    assert not any(mark in p for p in first + after), (mark, first, after)


async def test_close_destroys_warm_and_claimed(make_pool: MakePool) -> None:
    pool = await make_pool(warm=2)
    await wait_until(lambda: stat(pool, "warm") == 2, what="the warm set to fill")
    held = await pool.claim()
    pids = [sb.handle.backend_data.pid for sb in pool._tps["default"].warm] + [held.handle.backend_data.pid]
    await pool.close()
    assert not any(pid_running(p) for p in pids)
    with pytest.raises(sandboxes.SandboxLost):
        await held.exec(["true"])


async def test_orphans_of_a_dead_pool_are_reaped(native: Any, make_pool: MakePool) -> None:
    root = local_backend.default_run_root()
    dead_dir = root / f"pool-dead{secrets.token_hex(4)}"
    name = f"sb-orphan-{secrets.token_hex(4)}"
    dead_dir.mkdir(parents=True)
    # An owner pid that is certainly dead: a child we already reaped.
    child = await asyncio.create_subprocess_exec("true")
    await child.wait()
    (dead_dir / "owner.json").write_text(json.dumps({"pid": child.pid, "starttime": 1}))
    orphan = await native.launch_local(
        native.LaunchConfig(sandboxes._bridge.agent_path(), str(dead_dir / name), lease_ttl_s=300)
    )
    try:
        record = {
            "pid": orphan.pid,
            "starttime": rundirs.starttime(orphan.pid),
            "cgroup": orphan.cgroup,
            "run_dir": orphan.run_dir,
        }
        (dead_dir / f"{name}.json").write_text(json.dumps(record))
        assert orphan.alive()

        await make_pool(warm=0)

        assert not dead_dir.exists()
        assert not pid_running(orphan.pid)
        await asyncio.wait_for(orphan.wait(), 30)
        assert not orphan.alive()
        assert not orphan.cgroup or not cgroup_exists(orphan.cgroup)
    finally:
        orphan.kill()


async def test_a_pool_killed_with_sigkill_leaves_nothing(native: Any, tmp_path: Path) -> None:
    """No later pool needed: the pool's watchdog reaps its agents (a lease of 300 s would keep
    them alive for minutes), a paused one too, cgroups, run dirs and host id ranges once its
    owner is gone."""
    script = tmp_path / "owner.py"
    script.write_text(
        textwrap.dedent("""
        import asyncio, json, os, sys
        import sandboxes
        async def main():
            t = sandboxes.Template(lease_ttl_s=300.0)
            pool = sandboxes.Pool(warm=1, templates={"default": t, "root": t.replace(name="root", user="root")})
            await pool.start()
            a = await pool.claim()
            b = await pool.claim("root") if os.geteuid() == 0 else a
            uid_map = (await b.exec(["cat", "/proc/self/uid_map"])).stdout.decode().split()
            await a.pause()  # a paused sandbox's processes die only once thawed
            while pool.stats()["default"]["warm"] < 1:
                await asyncio.sleep(0.01)
            agents = [(sb.handle.backend_data.pid, sb.handle.backend_data.cgroup, sb.handle.backend_data.run_dir)
                      for sb in {a, b} | set(pool._tps["default"].warm)]
            print(json.dumps({"agents": agents, "pool_dir": str(pool._tps["default"].backend.pool_dir),
                              "id_base": int(uid_map[1]) if b is not a else 0}), flush=True)
            await asyncio.sleep(3600)
        asyncio.run(main())
    """)
    )
    proc = await asyncio.create_subprocess_exec(sys.executable, str(script), stdout=asyncio.subprocess.PIPE)
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), 60)
        state = json.loads(line)
        assert len(state["agents"]) >= 2 and all(pid_running(pid) for pid, _, _ in state["agents"])
        started = {pid: rundirs.starttime(pid) for pid, _, _ in state["agents"]}  # pids get reused
    finally:
        proc.kill()
        await proc.wait()

    slot = (state["id_base"] - ids.FIRST_ID) // ids.RANGE if state["id_base"] else None

    def gone() -> bool:
        return (
            not any(
                rundirs.alive(pid, started[pid]) or (cg and cgroup_exists(cg)) or os.path.exists(rd)
                for pid, cg, rd in state["agents"]
            )
            and not os.path.exists(state["pool_dir"])
            # the watchdog frees the id range last, after the pool dir
            and (slot is None or not (ids.id_dir() / str(slot)).exists())
        )

    await wait_until(gone, timeout=30, what="the dead pool's agents, cgroups, run dirs and id range to go")


async def test_live_pools_are_not_reaped(make_pool: MakePool) -> None:
    first = await make_pool(warm=1)
    await wait_until(lambda: stat(first, "warm") == 1, what="a warm sandbox")
    await make_pool(warm=0)  # reaps at start; must leave the live pool alone
    async with first.sandbox() as sb:
        assert (await sb.exec(["true"])).exit_code == 0


async def test_failing_program_is_a_result(pool: Pool) -> None:
    async with pool.sandbox() as sb:
        r = await sb.exec(["/bin/sh", "-c", "echo bad >&2; exit 5"])
        assert (r.exit_code, r.stderr, r.ok) == (5, b"bad\n", False)
        r = await sb.exec(["python3", "-c", "raise SystemExit('boom')"])
        assert r.exit_code == 1 and b"boom" in r.stderr


async def test_invalid_requests_raise_and_the_sandbox_keeps_working(pool: Pool) -> None:
    async with pool.sandbox() as sb:
        for bad in (
            lambda: sb.exec([]),
            lambda: sb.exec(""),
            lambda: sb.exec(["true"], limits=Limits(memory_bytes=-1)),
            lambda: sb.exec(["true"], limits=Limits(wall_time_s=10**9)),
            lambda: sb.exec(["true"], limits=Limits(max_pids=1 << 40)),
            lambda: sb.exec(["true"], timeout=-1),
            lambda: sb.exec(["true"], env={"BAD=NAME": "x"}),
            lambda: sb.exec(["a\0b"]),
        ):
            with pytest.raises(sandboxes.InvalidRequest):
                await bad()
        assert (await sb.exec(["echo", "fine"])).stdout == b"fine\n"


async def test_unknown_template_and_bad_pool_arguments(pool: Pool) -> None:
    with pytest.raises(sandboxes.NotFound):
        await pool.claim("nope")
    with pytest.raises(sandboxes.InvalidRequest):
        Pool(warm=-1)
    with pytest.raises(sandboxes.InvalidRequest):
        Pool(memory_bytes=-5)
    with pytest.raises(sandboxes.InvalidRequest):
        sandboxes.Template(lease_ttl_s=float("nan"))


def python_children(pid: int) -> list[int]:
    """Host pids of the python3 processes whose parent is `pid`."""
    out = []
    for d in Path("/proc").iterdir():
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        comm, rest = stat[stat.find("(") + 1 : stat.rfind(")")], stat[stat.rfind(")") + 2 :].split()
        if comm.startswith("python3") and int(rest[1]) == pid and rest[0] not in "ZX":
            out.append(int(d.name))
    return out


async def test_an_eager_template_starts_the_python_zygote_with_the_sandbox(make_pool: MakePool) -> None:
    """`python_zygote="eager"`: the agent starts its Python zygote with the sandbox and says it is
    ready once the zygote is (bounded at 10 s), so a claimed sandbox's first Python execution is
    already a fork of it. With "lazy" (the default) no interpreter runs until Python does: where
    the zygote is made from the backend's template (a root manager, the host's /usr), the first
    Python execution is a fork of the template, run in place of a zygote, and the second makes the
    zygote and is a fork of it; elsewhere the second Python execution starts
    it and is spawned (the first starts nothing: a sandbox that runs Python once never pays for
    it). With "off" Python is always spawned. Watched from the host too: the zygote is the
    agent's child."""
    templates = {m: sandboxes.Template(name=m, warm=1, python_zygote=m) for m in ("eager", "lazy", "off")}
    assert sandboxes.Template().python_zygote == "lazy"
    pool = await make_pool(templates=templates)
    async with pool.sandbox("eager") as sb:
        assert python_children(sb.handle.backend_data.pid) != []
        r = await sb.exec(["python3", "-c", "print(1)"])
        assert (r.stdout, r.path) == (b"1\n", "zygote")
        report = await sb.run_tests("def f():\n    return 1\n", [sandboxes.TestCase(check="assert f() == 1")])
        assert report.all_passed and report.cases[0].path == "zygote"
    async with pool.sandbox("lazy") as sb:
        agent = sb.handle.backend_data.pid
        assert (await sb.exec(["true"])).exit_code == 0
        assert python_children(agent) == []
        if python_template.eligible(templates["lazy"]):
            # The first run: a fork of the template, which ran it in place of a zygote.
            assert (await sb.exec(["python3", "-c", "print(1)"])).path == "zygote"
            assert python_children(agent) == []
            assert (await sb.exec(["python3", "-c", "print(1)"])).path == "zygote"
            assert python_children(agent) != []
        else:
            assert (await sb.exec(["python3", "-c", "print(1)"])).path == "spawn"
            assert python_children(agent) == []
            assert (await sb.exec(["python3", "-c", "print(1)"])).path == "spawn"
            await wait_until(lambda: python_children(agent), what="the lazy zygote")
    async with pool.sandbox("off") as sb:
        for _ in range(3):
            assert (await sb.exec(["python3", "-c", "print(1)"])).path == "spawn"
        assert python_children(sb.handle.backend_data.pid) == []
    with pytest.raises(sandboxes.InvalidRequest, match="python_zygote"):
        sandboxes.Template(python_zygote="always")


async def test_several_templates(make_pool: MakePool) -> None:
    small = sandboxes.Template(name="small", warm=1, env={"KIND": "small"})
    big = sandboxes.Template(name="big", warm=0, env={"KIND": "big"}, memory_bytes=512 << 20)
    pool = await make_pool(templates={"small": small, "big": big})
    assert pool.default_template == "small" or pool.default_template == "big"
    async with pool.sandbox("big") as sb:
        assert (await sb.exec("echo $KIND")).stdout == b"big\n"
    async with pool.sandbox("small") as sb:
        assert (await sb.exec("echo $KIND")).stdout == b"small\n"
    assert set(pool.stats()) == {"small", "big"}


async def test_a_started_pool_serves_a_template_added_later(make_pool) -> None:
    pool = await make_pool(warm=1)
    extra = sandboxes.Template(name="extra", env={"KIND": "extra"}, warm=0)
    await pool.add_template(extra)
    await pool.add_template(extra)  # the same template again: nothing changes
    with pytest.raises(sandboxes.InvalidRequest):
        await pool.add_template(extra.replace(env={"KIND": "other"}))
    with pytest.raises(sandboxes.InvalidRequest):
        await pool.add_template(sandboxes.Template(name="elsewhere", backend="docker"))
    assert "extra" in pool.templates
    async with pool.sandbox(template="extra") as sb:  # warm 0: created on demand
        assert (await sb.exec("echo $KIND")).stdout == b"extra\n"
    assert pool.stats()["extra"]["created_total"] == 1


async def test_claims_and_releases_waiting_for_the_hosts_id_lock_leave_the_event_loop_running(
    tmp_path: Path,
) -> None:
    """Another process holds the host's id lock (another pool's claim): a claim waits for it in a
    thread while the event loop runs on, a release is finished once the lock is free, and a claim
    cancelled while it waits frees what its thread claims."""
    root = tmp_path / "ids"
    base = ids.claim("sb-a", root)
    held_by_a = root / str((base - ids.FIRST_ID) // ids.RANGE)
    lock = "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR); fcntl.flock(fd, fcntl.LOCK_EX)"
    other = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        f"{lock}; print('held', flush=True); sys.stdin.read()",
        str(root / ".lock"),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert other.stdin is not None and other.stdout is not None
    try:
        assert await other.stdout.readline() == b"held\n"
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.01)

        ticking = asyncio.create_task(tick())
        claim_b = asyncio.create_task(ids.claim_async("sb-b", root))
        claim_c = asyncio.create_task(ids.claim_async("sb-c", root))
        ids.release_soon(base, "sb-a", root)
        await asyncio.sleep(0.3)
        assert ticks >= 10 and not claim_b.done() and held_by_a.exists()
        claim_c.cancel()
        other.stdin.close()
        await other.wait()
        assert (await asyncio.wait_for(claim_b, 30)) >= ids.FIRST_ID
        with pytest.raises(asyncio.CancelledError):
            await claim_c
        await wait_until(lambda: not held_by_a.exists(), what="sb-a's range released")
        await wait_until(
            lambda: sorted(p.read_text().split()[2] for p in root.iterdir() if p.name.isdigit()) == ["sb-b"],
            what="sb-c's range, claimed for nobody, freed",
        )
        ticking.cancel()
    finally:
        if other.returncode is None:
            other.kill()
            await other.wait()


async def test_an_id_range_stays_held_while_its_sandbox_may_outlive_its_pool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A docker sandbox's range is held by its run dir as well as by its pool's process: a pool
    killed while its container lives on (until the agent's lease lapses, or a later pool reaps
    it) leaves the range to that container; once the run dir is gone, the range is free."""
    root, run_dir = tmp_path / "ids", tmp_path / "sb-a"
    run_dir.mkdir()
    base = ids.claim("sb-a", root, holder=run_dir)
    slot = (base - ids.FIRST_ID) // ids.RANGE
    monkeypatch.setattr(ids.random, "randrange", lambda n: slot)  # every claim tries that slot first
    (root / str(slot)).write_text(f"999999999 1 sb-a {run_dir}\n")  # its pool's process is dead
    assert ids.release_owned_by(999999999, 1, root) == 0
    assert ids.claim("sb-b", root) != base
    shutil.rmtree(run_dir)  # the container is removed with its run dir
    assert ids.claim("sb-c", root) == base
