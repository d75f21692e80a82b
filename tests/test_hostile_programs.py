"""What a hostile or careless program leaves in its sandbox must not hang, crash or mislabel the
caller's next call: file calls on things that are not regular files, files far larger than
memory, arguments over the kernel's limits, a full disk, and inode exhaustion. Each is a clear
error of the caller (or a program result), and the sandbox keeps serving."""

from __future__ import annotations

import asyncio

import pytest

import sandboxes
from sandboxes import templates
from sandboxes.backends.local import _cgroup_dirs

pytestmark = pytest.mark.asyncio

# A call that hangs is a failure; this bounds the wait so a regression fails instead of blocking
# the run (it is not a speed assertion: a correct call returns at once).
HANG = 30.0


async def still_serves(sb: sandboxes.Sandbox) -> None:
    await sb.write_file("alive.txt", b"yes")
    assert await sb.read_file("alive.txt") == b"yes"
    assert (await sb.exec(["echo", "ok"])).stdout == b"ok\n"


async def test_file_calls_refuse_a_fifo_instead_of_waiting_on_it(sb: sandboxes.Sandbox) -> None:
    r = await sb.exec("mkfifo pipe && ls -l pipe")
    assert r.exit_code == 0, r.stderr
    with pytest.raises(sandboxes.InvalidRequest, match="FIFO") as read_err:
        await asyncio.wait_for(sb.read_file("pipe"), HANG)
    assert not read_err.value.retryable
    # No reader: the open itself fails at once.
    with pytest.raises(sandboxes.InvalidRequest, match="FIFO"):
        await asyncio.wait_for(sb.write_file("pipe", b"data"), HANG)
    # A reader waiting on it: the open succeeds, the type check on the descriptor refuses. (The
    # refusal closes the FIFO, so `cat` ends; the reader lives on until it is killed.)
    async with sb.exec_stream("cat pipe > got.txt; sleep 60") as reader:
        async for ev in reader:
            if ev.kind == "started":
                break
        with pytest.raises(sandboxes.InvalidRequest, match="FIFO"):
            await asyncio.wait_for(sb.write_file("pipe", b"data"), HANG)
        await reader.signal(9)
    await still_serves(sb)


async def test_file_calls_refuse_sockets_and_device_links(sb: sandboxes.Sandbox) -> None:
    r = await sb.exec(["python3", "-c", "import socket; s = socket.socket(socket.AF_UNIX); s.bind('sock')"])
    assert r.exit_code == 0, r.stderr
    with pytest.raises(sandboxes.InvalidRequest, match="socket"):
        await asyncio.wait_for(sb.read_file("sock"), HANG)
    assert (await sb.exec("ln -s /dev/zero zero")).exit_code == 0
    with pytest.raises(sandboxes.InvalidRequest):
        await asyncio.wait_for(sb.read_file("zero"), HANG)
    await still_serves(sb)


async def test_a_huge_sparse_file_is_too_large_not_an_allocation(sb: sandboxes.Sandbox) -> None:
    """100 GB of holes: the old client reserved the reported size up front and aborted."""
    big = sandboxes.Limits(max_file_size_bytes=1 << 40)
    r = await sb.exec("truncate -s 100G big && printf tail >> big", limits=big)
    assert r.exit_code == 0, r
    with pytest.raises(sandboxes.TooLarge) as err:
        await sb.read_file("big")
    assert not err.value.retryable and isinstance(err.value, sandboxes.InvalidRequest)
    # Parts of it are readable.
    size = 100 * (1 << 30) + 4
    assert await sb.read_file("big", offset=size - 4) == b"tail"
    assert await sb.read_file("big", offset=size - 8, length=6) == b"\0\0\0\0ta"
    assert await sb.read_file("big", offset=size + 10) == b""
    await still_serves(sb)


async def test_reads_are_bounded_by_the_callers_max_bytes(sb: sandboxes.Sandbox) -> None:
    blob = bytes(range(256)) * 8192  # 2 MiB: more than one chunk
    await sb.write_file("blob", blob)
    assert await sb.read_file("blob", max_bytes=len(blob)) == blob
    with pytest.raises(sandboxes.TooLarge, match="limit of 1000"):
        await sb.read_file("blob", max_bytes=1000)
    assert await sb.read_file("blob", offset=1_500_000, length=700_000) == blob[1_500_000:2_200_000]
    assert await sb.read_file("blob", length=1000, max_bytes=1000) == blob[:1000]
    for bad in ({"offset": -1}, {"length": 0}, {"max_bytes": 0}, {"length": 1.5}):
        with pytest.raises(sandboxes.InvalidRequest):
            await sb.read_file("blob", **bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("streamed", [False, True])
async def test_arguments_over_the_kernels_limit_are_a_result(sb: sandboxes.Sandbox, streamed: bool) -> None:
    """One argument of 300 KiB is over the kernel's per-string limit (E2BIG): a shell reports
    exit 126; it was an infrastructure error, which RL code reschedules forever."""
    argv = ["/bin/echo", "x" * 300_000]
    r = await (sb.exec_stream(argv).wait() if streamed else sb.exec(argv))
    assert r.exit_code == 126
    assert b"Argument list too long" in r.stderr and r.stdout == b""
    await still_serves(sb)


async def test_python_code_over_the_kernels_limit_is_a_result(sb: sandboxes.Sandbox) -> None:
    code = "x = 1\n" * 50_000 + "print(x)"
    r = await sb.exec(["python3", "-c", code])
    # Spawned, the kernel refuses it (126); forked from the prewarmed interpreter it runs.
    assert (r.exit_code, r.stdout) in ((126, b""), (0, b"1\n")), r


async def test_a_full_disk_is_no_space_and_the_sandbox_serves_on(make_pool) -> None:
    pool = await make_pool(warm=1, templates={"default": sandboxes.Template(work_size_bytes=1 << 20)})
    async with pool.sandbox() as sb:
        with pytest.raises(sandboxes.NoSpace) as err:
            await sb.write_file("fill.bin", b"\0" * (2 << 20))
        assert not err.value.retryable
        r = await sb.exec("head -c 2000000 /dev/zero > fill2.bin")
        assert r.exit_code != 0 and b"No space left" in r.stderr
        await sb.remove("fill2.bin")
        await sb.remove("fill.bin")
        await still_serves(sb)


async def test_inodes_of_the_sandbox_disk_are_bounded(sb: sandboxes.Sandbox) -> None:
    """Empty files cost no space but kernel memory: their count is bounded by the disk's size."""
    work = (await sb.info()).work_dir
    mounts = (await sb.exec(["cat", "/proc/self/mounts"])).stdout.decode()

    def inodes_of(target: str) -> int:
        line = next(m for m in mounts.splitlines() if m.split()[1] == target)
        return int(dict(o.partition("=")[::2] for o in line.split()[3].split(","))["nr_inodes"])

    assert inodes_of(work) == templates.DEFAULT_WORK_SIZE_BYTES // templates.BYTES_PER_INODE
    inodes = inodes_of("/tmp")
    assert inodes == templates.DEFAULT_TMP_SIZE_BYTES // templates.BYTES_PER_INODE
    code = (
        "import os\n"
        "n = 0\n"
        "try:\n"
        f"    while n < {inodes + 10}:\n"
        "        open(f'f{n}', 'w').close(); n += 1\n"
        "except OSError as e:\n"
        "    print(e.errno, n)\n"
    )
    r = await sb.exec(["python3", "-c", code], cwd="/tmp", limits=sandboxes.Limits(wall_time_s=120))
    errno, made = map(int, r.stdout.split())
    assert errno == 28 and made < inodes, r
    assert (await sb.exec("find /tmp -name 'f*' -delete")).exit_code == 0
    await still_serves(sb)


# Fills /tmp: every byte (one file), then every inode (empty files); prints the files made.
FILL_TMP = """
import errno
try:
    with open("/tmp/blob", "wb") as f:
        while True:
            f.write(b"x" * 65536); f.flush()
except OSError as e:
    assert e.errno == errno.ENOSPC, e
n = 0
try:
    while True:
        open(f"/tmp/f{n}", "w").close(); n += 1
except OSError as e:
    assert e.errno == errno.ENOSPC, e
print(n)
"""


async def test_a_full_tmp_leaves_the_next_grading_room(make_pool) -> None:
    """A program that fills its sandbox's /tmp (every inode, every byte) leaves the judge's own
    scratch alone: the next grading compiles and runs; a case that fills its own directory gets
    its ENOSPC as a result, and the grading after it runs too."""
    small = sandboxes.Template(tmp_size_bytes=1 << 20)
    pool = await make_pool(warm=1, templates={"default": small})
    async with pool.sandbox() as sb:
        r = await sb.exec(
            ["python3", "-c", FILL_TMP], limits=sandboxes.Limits(wall_time_s=60, max_file_size_bytes=1 << 40)
        )
        assert r.exit_code == 0 and int(r.stdout) > 0, r
        case = sandboxes.TestCase("2 3\n", "5\n")
        report = await sb.run_tests("print(sum(map(int, input().split())))", [case])
        assert report.all_passed, report
        c = '#include <stdio.h>\nint main(void){int a,b; scanf("%d %d",&a,&b); printf("%d\\n",a+b);}\n'
        report = await sb.run_tests(c, [case], language="c")
        assert report.all_passed, report
        hog = "with open('big', 'wb') as f:\n    while True:\n        f.write(b'x' * 65536); f.flush()\n"
        report = await sb.run_tests(hog, [sandboxes.TestCase("", "")])
        (result,) = report.cases
        assert result.verdict == "runtime_error" and b"No space left" in result.stderr, report
        report = await sb.run_tests("print(sum(map(int, input().split())))", [case])
        assert report.all_passed, report
        assert (await sb.exec(["sh", "-c", "rm -rf /tmp/*"])).exit_code == 0
        await still_serves(sb)


# --- bounded by default ----------------------------------------------------------------------------


async def test_a_default_sandbox_is_bounded_by_the_kernel(sb: sandboxes.Sandbox) -> None:
    """Memory, pids and CPU caps of the default template, read from the host's view of the
    sandbox's cgroup, and enforced against a program whose own exec limits are looser."""
    t = sandboxes.Template()
    assert (t.memory_bytes, t.max_pids, t.cpu_quota) == (
        templates.DEFAULT_MEMORY_BYTES,
        templates.DEFAULT_MAX_PIDS,
        templates.DEFAULT_CPU_QUOTA,
    )
    values: dict[str, str] = {}
    for d in _cgroup_dirs(sb.handle.backend_data.cgroup):
        for name in ("memory.limit_in_bytes", "memory.max", "pids.max", "cpu.cfs_quota_us", "cpu.max"):
            if (d / name).exists():
                values[name] = (d / name).read_text().strip()
    assert values.get("memory.limit_in_bytes", values.get("memory.max")) == str(t.memory_bytes)
    assert values["pids.max"] == str(t.max_pids)
    quota = int(t.cpu_quota * 100_000)
    assert values.get("cpu.cfs_quota_us") == str(quota) or values.get("cpu.max") == f"{quota} 100000"

    loose = sandboxes.Limits(memory_bytes=4 << 30, max_pids=4096, wall_time_s=60)
    r = await sb.exec(["python3", "-c", "b = b'x' * (1536 << 20); print('allocated')"], limits=loose)
    assert r.stdout == b"" and r.exit_code != 0, r
    forks = (
        "import os, signal\n"
        "kids = []\n"
        "try:\n"
        "    while len(kids) < 1000:\n"
        "        pid = os.fork()\n"
        "        if pid == 0:\n"
        "            signal.pause()\n"
        "        kids.append(pid)\n"
        "except OSError as e:\n"
        "    print(e.errno, len(kids))\n"
        "for k in kids:\n"
        "    os.kill(k, 9)\n"
    )
    r = await sb.exec(["python3", "-c", forks], limits=loose)
    errno, made = map(int, r.stdout.split())
    assert errno == 11 and made < t.max_pids, r
    await still_serves(sb)


# --- per-uid kernel limits are per sandbox ----------------------------------------------------------

EXHAUST_INOTIFY = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
fds = []
while True:
    fd = libc.inotify_init()
    if fd < 0:
        print(ctypes.get_errno(), len(fds), flush=True)
        break
    fds.append(fd)
import time
time.sleep(60)
"""


@pytest.mark.requires("root", reason="host id ranges need a manager that is root")
async def test_one_sandbox_using_up_a_per_uid_limit_leaves_another_its_own(pool: sandboxes.Pool) -> None:
    """inotify instances are counted per host uid: sandboxes with one shared uid took them from
    each other. Each sandbox's programs now run as a host uid of its own."""
    async with pool.sandbox() as a, pool.sandbox() as b:
        async with a.exec_stream(["python3", "-c", EXHAUST_INOTIFY]) as hog:
            out = b""
            async for ev in hog:
                if ev.kind == "stdout":
                    out += ev.data
                    if out.endswith(b"\n"):
                        break
            errno, made = map(int, out.split())
            assert errno == 24 and made > 0  # EMFILE: a's uid is out of instances
            r = await b.exec(["python3", "-c", "import ctypes; print(ctypes.CDLL(None).inotify_init() >= 0)"])
            assert r.stdout == b"True\n", r
            await hog.signal(9)
        ids_seen = set()
        for sb in (a, b):
            r = await sb.exec(["sh", "-c", "id -u; cat /proc/self/uid_map"])
            inside, _, base, _ = r.stdout.split()
            ids_seen.add(int(base) + int(inside))
            assert inside == b"65534"
        assert len(ids_seen) == 2
