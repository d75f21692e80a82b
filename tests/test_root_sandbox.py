"""Root sandboxes (`Template(user="root")`) on the local, docker and kubernetes backends: root
inside a user namespace of the sandbox's own, a writable root file system thrown away with the
sandbox, and no capability over the host. Checked from inside (as root) and from the host's side.
Docker runs the default image, whose unpacked copy in the host's cache must never change.

Kubernetes runs on the EMULATED cluster (`sandboxes_testing.kube_emulator`: no real API server
or kubelet can run here) in its user-namespace mode: each pod is the default image, run as a
container runtime runs a `hostUsers: false` pod (`sandboxes_testing.userns_pod`: the image
idmapped into a user namespace of a host id range of the pod's own, the pod's namespaces owned
by it, a masked /proc unless the pod asks for `procMount: Unmasked`), so the agent builds the
sandbox with exactly a pod's powers. `tests/test_kubernetes_e2e.py` runs on a real cluster when
one is configured."""

from __future__ import annotations

import os
import secrets
import signal
from pathlib import Path

import pytest
from helpers import http_answering, pgrep, wait_until

import sandboxes
from sandboxes import Template, TestCase
from sandboxes.backends import ids

ROOT = Template(name="root", user="root")

pytestmark = [
    pytest.mark.asyncio,
    pytest.mark.requires("root", reason="root sandboxes need a manager that is root"),
]


@pytest.fixture(params=["local", "docker", "kubernetes"])
async def root_pool(request, make_pool):
    backend = request.param
    if backend != "local":
        request.getfixturevalue("images")
    root = ROOT.replace(backend=backend)
    templates = {"root": root, "small": root.replace(name="small", root_size_bytes=8 << 20)}
    if backend != "kubernetes":
        pool = await make_pool(backend=backend, warm=0, templates=templates)
        pool.test_backend = backend
        yield pool
        return
    from sandboxes_testing.kube_emulator import emulated_cluster

    from sandboxes.backends.docker import DEFAULT_IMAGE
    from sandboxes.backends.kubernetes import KubeConfig, KubernetesBackend

    async with emulated_cluster(user_namespaces=True) as (_api, _kubelet, url):
        cfg = KubeConfig(api_url=url, identity="root-test", port_from_annotation=True, image=DEFAULT_IMAGE)
        pool = sandboxes.Pool(backend=KubernetesBackend(cfg), warm=0, templates=templates, claim_timeout=60.0)
        await pool.start()
        pool.test_backend = backend
        try:
            yield pool
        finally:
            await pool.close()


def image_of(pool) -> Path | None:
    """The unpacked image a docker root sandbox (or an emulated pod) is built on (None: the local
    host view)."""
    if pool.test_backend == "local":
        return None
    from sandboxes.backends import images
    from sandboxes.backends.docker import DEFAULT_IMAGE

    return images.resolve(DEFAULT_IMAGE)


async def sh(sb: sandboxes.Sandbox, cmd: str) -> sandboxes.ExecResult:
    return await sb.exec(["/bin/sh", "-c", cmd])


def host_uid_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    raise AssertionError(f"no Uid line for {pid}")


async def test_root_inside_is_an_unprivileged_range_of_its_own_outside(root_pool) -> None:
    async with root_pool.sandbox(template="root") as a, root_pool.sandbox(template="root") as b:
        r = await sh(a, "id -u; id -g; cat /proc/self/uid_map")
        uid, gid, *mapping = r.stdout.decode().split()
        assert (uid, gid) == ("0", "0"), r
        if root_pool.test_backend == "kubernetes":
            # The pod's own ids, all but the agent's (the pod's user namespace has a range of its own).
            assert mapping == ["0", "0", str(ids.RANGE - 1)], r
            base = None
        else:
            base = int(mapping[1])
            assert base >= ids.FIRST_ID and mapping[2] == str(ids.RANGE)
        assert (await a.info()).sandbox_uid == 0
        # From the host: a program that is root inside runs as the sandbox's own host uid.
        marks = {}
        for sb in (a, b):
            mark = f"{86000 + secrets.randbelow(399)}.{secrets.randbelow(10**9):09d}"
            stream = sb.exec_stream(["sleep", mark])
            await stream.__aenter__()
            marks[mark] = stream
        uids = []
        for mark, stream in marks.items():
            await wait_until(lambda m=mark: bool(pgrep(m)), timeout=10)
            uids.append(host_uid_of(pgrep(mark)[0]))
            await stream.signal(9)
            await stream.__aexit__(None, None, None)
        assert uids[1] != uids[0] and min(uids) >= ids.FIRST_ID
        assert base is None or uids[0] == base


async def test_the_root_is_writable_private_and_thrown_away(root_pool) -> None:
    name = f"from-sandbox-{secrets.token_hex(4)}"
    async with root_pool.sandbox(template="root") as sb:
        cmd = (
            f"echo top > /{name} && mkdir -p /app && echo app > /app/{name} && "
            f"echo lib > /usr/lib/{name} && echo home > /root/{name} && echo etc > /etc/{name} && "
            f"cat /{name} /app/{name} /usr/lib/{name} /root/{name} /etc/{name}"
        )
        r = await sh(sb, cmd)
        assert (r.exit_code, r.stdout) == (0, b"top\napp\nlib\nhome\netc\n"), r
        # Existing host files under /usr can be changed too (copied up), and stay unchanged outside.
        r = await sh(sb, "echo changed >> /usr/lib/os-release && tail -1 /usr/lib/os-release")
        assert r.stdout == b"changed\n", r
        # File calls reach the whole root, as the same root.
        await sb.write_file(f"/app/sub/{name}", b"via the agent")
        assert await sb.read_file(f"/usr/lib/{name}") == b"lib\n"
        r = await sh(sb, f"ls -ln /app/sub/{name} | cut -d' ' -f3; cat /app/sub/{name}")
        assert r.stdout == b"0\nvia the agent", r
    assert not Path(f"/usr/lib/{name}").exists() and not Path(f"/{name}").exists()
    assert b"changed" not in Path("/usr/lib/os-release").read_bytes()
    if (image := image_of(root_pool)) is not None:
        assert not (image / "usr/lib" / name).exists() and not (image / name).exists()
        assert b"changed" not in (image / "usr/lib/os-release").read_bytes()
    async with root_pool.sandbox(template="root") as fresh:
        r = await sh(fresh, f"ls /{name} /app /usr/lib/{name} /root/{name} 2>&1; tail -1 /usr/lib/os-release")
        assert r.stdout.count(b"No such file") == 4 and b"changed" not in r.stdout, r


async def test_root_inside_has_no_power_over_the_host(root_pool) -> None:
    async with root_pool.sandbox(template="root") as sb:
        checks = {
            "mount": "mkdir -p /mnt/t && mount -t tmpfs none /mnt/t",
            "unshare": "unshare -U true",
            "unshare-mount": "unshare -m true",
            "raw socket": "python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, 1)'",
            "load a module": "python3 -c 'import ctypes, sys; libc = ctypes.CDLL(None, use_errno=True); "
            'sys.exit(0 if libc.syscall(175, 0, 0, b"") == 0 else 1)\'',
            "trace the agent": "python3 -c 'import ctypes, sys; libc = ctypes.CDLL(None, use_errno=True); "
            "sys.exit(0 if libc.ptrace(16, 1, 0, 0) == 0 else 1)'",
            "signal the agent": "kill -0 1",
            "read the agent's environment": "cat /proc/1/environ",
            "read the agent's token or socket": "ls /run/sandbox || cat /run/sandbox/token",
            "read a pod's token": "cat /var/run/sandboxes/token",
            "set the clock": "date -s '2001-01-01'",
            "change the hostname": "hostname other",
        }
        if root_pool.test_backend == "local":  # the host's own files are in view there
            checks["write a read-only host file"] = "echo x >> /etc/ld.so.cache"
        for what, cmd in checks.items():
            r = await sh(sb, cmd)
            assert r.exit_code != 0, (what, r)
        r = await sh(sb, "ls /proc | grep -c '^[0-9]'; ls /")
        visible, *top = r.stdout.decode().split()
        assert int(visible) <= 3, r  # the shell and ls, never the agent
        assert not any(t.startswith("sbx-") for t in top)
        if root_pool.test_backend == "local":
            # The sandbox's own /run, as a fresh Debian has it: never the host's run dir (docker:
            # the image's own /run).
            # (`mount` above left its /run/mount behind.)
            assert set((await sh(sb, "ls -A /run")).stdout.split()) <= {b"lock", b"mount"}
    # File calls never leave the sandbox's own file systems.
    paths = ["/proc/1/environ", "/proc/self/status", "/dev/null", "/sys/fs/cgroup/pids/x"]
    if root_pool.test_backend == "local":
        paths.append("/etc/ld.so.cache")
    async with root_pool.sandbox(template="root") as sb:
        for path in paths:
            with pytest.raises(sandboxes.SandboxError) as err:
                await sb.write_file(path, b"x")
            assert isinstance(err.value, (sandboxes.InvalidRequest, sandboxes.AuthError)), (path, err.value)


def _readlink(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return ""


async def test_a_restore_targets_pid_namespace_init_holds_nothing_root_inside_could_use(make_pool) -> None:
    """A local sandbox that memory snapshots' programs are restored into (`memory_restores`) has
    a pid namespace of its programs' user namespace's (so that a restored program's children and
    threads get their pids), and its init is a process of that user namespace: root inside may
    see it and write its memory. It holds nothing: no fd but its stdin (a pipe whose other end
    only the agent holds), no environment, an empty read-only root, namespaces of its own (not
    the host's network) and a seccomp filter that lets it only read and end; its signals from
    inside are ignored, the kernel knobs root would own over the pid namespace (`ns_last_pid`,
    `pid_max`) are read-only, and the namespace ends with the agent."""
    pool = await make_pool(warm=0, templates={"root": ROOT.replace(memory_restores=True)})
    async with pool.sandbox(template="root") as sb:
        r = await sh(
            sb,
            "cat /proc/1/cmdline | tr '\\0' ' '; echo; wc -c < /proc/1/environ; ls -A /proc/1/fd; readlink /proc/1/fd/0 | cut -d: -f1; "
            "ls -A /proc/1/root/ | wc -l; grep Seccomp: /proc/1/status; "
            "for ns in net mnt ipc uts; do [ $(readlink /proc/1/ns/$ns) != $(readlink /proc/self/ns/$ns) ] && echo own; done",
        )
        assert r.exit_code == 0, r
        lines = r.stdout.decode().splitlines()
        assert lines[0].split()[1:] == ["--pid-ns-init"], r
        # No environment, one fd (its stdin: the pipe whose end is the agent's), an empty root.
        assert lines[1:6] == ["0", "0", "pipe", "0", "Seccomp:\t2"], r
        assert lines[6:] == ["own"] * 4, r
        # Seen from the host (the init is this process's child): not in the host's network or
        # mount namespace either.
        agent_ns = os.readlink(f"/proc/{int(sb.handle.backend_data.pid)}/ns/pid")
        children = [
            int(c)
            for task in Path("/proc/self/task").iterdir()
            for c in (task / "children").read_text().split()
        ]
        [init] = [
            c
            for c in children
            if _readlink(f"/proc/{c}/ns/pid") == agent_ns and c != sb.handle.backend_data.pid
        ]
        for ns in ("net", "mnt"):
            assert os.readlink(f"/proc/{init}/ns/{ns}") != os.readlink(f"/proc/self/ns/{ns}")
        for what, cmd in {
            "end the init": "kill -9 1; kill -TERM 1; sleep 0.2; kill -0 1",
            "move the next pid": "echo 5000 > /proc/sys/kernel/ns_last_pid",
            "lower pid_max": "echo 400 > /proc/sys/kernel/pid_max",
        }.items():
            r = await sh(sb, cmd)
            assert (r.exit_code == 0) == (what == "end the init"), (what, r)
        assert (await sh(sb, "true")).exit_code == 0
        # Its namespace ends with the agent, however the agent ends, as it would with an agent
        # that is its init: the init reads its pipe's end and exits, killing every process
        # there (its exit then waits for the launcher to reap the agent, its own child).
        mark = f"{87000 + secrets.randbelow(399)}.{secrets.randbelow(10**9):09d}"
        await sb.exec(["sh", "-c", f"sleep {mark} &"], keep_descendants=True)
        await wait_until(lambda: bool(pgrep(f"sleep {mark}")), what="the program running")
        os.kill(int(sb.handle.backend_data.pid), signal.SIGKILL)
        await wait_until(lambda: not pgrep(f"sleep {mark}"), what="the program ended with the agent")
    assert not Path(f"/proc/{init}").exists()  # reaped with the sandbox


async def test_root_inside_cannot_stop_the_egress_helper(root_pool) -> None:
    """An allow-list sandbox's way out (the agent's helper, outside the sandbox) has an id no
    program has: root inside, and any uid it takes, cannot signal it."""
    async with http_answering(b"ok") as (port, _):
        t = ROOT.replace(name="egress", backend=root_pool.test_backend, network=(f"127.0.0.2:{port}",))
        await root_pool.add_template(t)
        fetch = (
            'python3 -c "import urllib.request; '
            f"print(urllib.request.urlopen('http://127.0.0.2:{port}/', timeout=20).read().decode())\""
        )
        async with root_pool.sandbox("egress") as sb:
            assert (await sh(sb, fetch)).stdout == b"ok\n"
            for uid in (0, 65534, 1000):
                drop = f"os.setgid({uid}); os.setuid({uid}); " if uid else ""
                await sh(sb, f"python3 -c 'import os, signal; {drop}os.kill(-1, signal.SIGKILL)'")
            r = await sh(sb, fetch)
            assert r.stdout == b"ok\n", r


async def test_the_root_disk_is_bounded_and_the_sandbox_serves_on(root_pool) -> None:
    async with root_pool.sandbox(template="small") as sb:
        r = await sh(sb, "head -c 16000000 /dev/zero > /big")
        assert r.exit_code != 0 and b"No space left" in r.stderr, r
        with pytest.raises(sandboxes.NoSpace):
            await sb.write_file("/app/big", b"\0" * (16 << 20))
        r = await sh(sb, "rm -f /big; echo ok > /after && cat /after")
        assert r.stdout == b"ok\n", r


async def test_programs_and_tests_run_as_root(root_pool) -> None:
    async with root_pool.sandbox(template="root") as sb:
        r = await sb.exec(["python3", "-c", "import os; print(os.getuid())"])
        assert r.stdout == b"0\n", r
        r = await sb.exec(["python3", "-c", "import os; print(os.getuid())"])  # through the zygote
        assert r.stdout == b"0\n", r
        report = await sb.run_tests(
            "import sys\nprint(int(sys.stdin.read()) * 2)",
            [TestCase(input="21", expected_output="42"), TestCase(input="2", expected_output="5")],
        )
        assert [c.verdict for c in report.cases] == ["accepted", "wrong_answer"], report
        c_report = await sb.run_tests(
            '#include <stdio.h>\nint main(){int x; scanf("%d", &x); printf("%d\\n", x + 1);}',
            [TestCase(input="1", expected_output="2")],
            language="c",
        )
        assert c_report.cases[0].verdict == "accepted", c_report


async def test_root_makes_users_and_programs_run_as_them(root_pool) -> None:
    """A root sandbox is a Linux user database: `useradd` makes a user and its group, `chown
    user:group` and `su` work, and a call may run as, or write files for, any of its users, with
    that user's ids, groups and home; from the host, such a program is the sandbox's own id
    range, never a host user's."""
    async with root_pool.sandbox(template="root") as sb:
        made = await sh(
            sb,
            "useradd -m -s /bin/sh agent && groupadd team && usermod -aG team agent"
            " && mkdir -p /srv/w && chown agent:agent /srv/w && id -u agent",
        )
        assert made.exit_code == 0, made
        uid = int(made.stdout)
        r = await sb.exec(
            ["/bin/sh", "-c", "id -u; id -g; id -Gn; echo $HOME $USER; touch /srv/w/f; touch /root/x"],
            user="agent",
        )
        out = r.stdout.decode().split("\n")
        assert out[:2] == [str(uid), str(uid)], r
        assert set(out[2].split()) == {"agent", "team"}, r
        assert out[3] == "/home/agent agent", r
        assert b"Permission denied" in r.stderr, r  # root's home is root's
        await sb.write_files({"/srv/w/note": b"hi", "/home/agent/deep/er/file": b"x"}, user="agent")
        owners = await sh(sb, "stat -c %U:%G /srv/w/note /srv/w/f /home/agent/deep /home/agent/deep/er/file")
        assert owners.stdout.split() == [b"agent:agent"] * 4, owners
        assert (await sb.exec(["sh", "-c", "echo more >> /srv/w/note"], user="agent")).exit_code == 0
        su = await sh(sb, "su agent -s /bin/sh -c 'id -un; echo $HOME'")
        assert su.stdout.split() == [b"agent", b"/home/agent"], su
        assert (await sh(sb, "su root -s /bin/sh -c 'id -u'")).stdout == b"0\n"
        if root_pool.test_backend == "local":  # the host's /usr has sudo (deploy/toolchains.sh)
            r = await sh(sb, "sudo -u agent id -un && sudo id -u")
            assert r.stdout == b"agent\n0\n", r
            # `login` gives the user the terminal (root inside owns the sandbox's terminals).
            shown = b""
            login = sb.exec_stream(
                ["/bin/sh", "-c", "login -f agent; echo rc=$?"], terminal=(24, 80), stdin=b"id -un\nexit\n"
            )
            async with login:
                async for ev in login:
                    shown += ev.data if ev.kind == "stdout" else b""
            assert b"agent\r\n" in shown and b"rc=0" in shown, shown  # `id -un` run by its shell
        # A uid without an account, as `setpriv --reuid` takes it.
        assert (await sb.exec(["id", "-u"], user="4321")).stdout == b"4321\n"
        with pytest.raises(sandboxes.InvalidRequest, match="no user"):
            await sb.exec(["id"], user="nobody-here")
        with pytest.raises(sandboxes.InvalidRequest, match="no user"):
            await sb.write_files({"/tmp/x": b""}, user="nobody-here")
        # From the host: the user's program runs in the sandbox's range, `uid` above its root.
        mine, roots = (f"{86000 + secrets.randbelow(399)}.{secrets.randbelow(10**9):09d}" for _ in "ab")
        async with sb.exec_stream(["sleep", mine], user="agent") as a, sb.exec_stream(["sleep", roots]) as b:
            await wait_until(lambda: bool(pgrep(mine)) and bool(pgrep(roots)), timeout=10)
            assert host_uid_of(pgrep(mine)[0]) == host_uid_of(pgrep(roots)[0]) + uid
            await a.signal(9)
            await b.signal(9)
        assert (await sh(sb, "echo serving")).stdout == b"serving\n"


async def test_a_sandbox_whose_programs_are_not_root_has_no_other_user(make_pool) -> None:
    """Only root inside may become another user: elsewhere a call naming another is refused (its
    own user is accepted), and the sandbox serves on."""
    pool = await make_pool(warm=0)
    async with pool.sandbox() as sb:
        own = (await sb.exec(["id", "-un"])).stdout.strip().decode()
        assert (await sb.exec(["id", "-un"], user=own)).stdout.strip().decode() == own
        for other in ("root", "0", "1000"):
            with pytest.raises(sandboxes.InvalidRequest, match="may not become another user"):
                await sb.exec(["id"], user=other)
        with pytest.raises(sandboxes.InvalidRequest, match="may not become another user"):
            await sb.write_files({"x": b""}, user="root")
        assert (await sb.exec(["id", "-u"])).exit_code == 0


async def test_id_ranges_are_released_and_a_dead_owners_are_reclaimed(root_pool, tmp_path) -> None:
    if root_pool.test_backend == "kubernetes":
        pytest.skip("a pod's ids are its own user namespace's (the emulated kubelet claims its range)")
    async with root_pool.sandbox(template="root") as sb:
        base = int((await sh(sb, "cat /proc/self/uid_map")).stdout.split()[1])
        slot = (base - ids.FIRST_ID) // ids.RANGE
        assert (ids.id_dir() / str(slot)).exists()
    assert not (ids.id_dir() / str(slot)).exists()
    # A slot file whose owner is gone (a pool killed with SIGKILL) counts as free.
    for s in range(ids.SLOTS):
        (tmp_path / str(s)).write_text(f"{2**22 + 7} 1 gone-{s}\n")
    taken = ids.claim("mine", root=tmp_path)
    slot = (taken - ids.FIRST_ID) // ids.RANGE
    assert (tmp_path / str(slot)).read_text().split()[2] == "mine"
    ids.release(taken, "someone-else", root=tmp_path)
    assert (tmp_path / str(slot)).exists()
    ids.release(taken, "mine", root=tmp_path)
    assert not (tmp_path / str(slot)).exists()


async def test_root_is_refused_where_the_backend_cannot_give_it() -> None:
    with pytest.raises(sandboxes.InvalidRequest):
        Template(user="admin")
