"""The kubernetes backend against an EMULATED control plane: no real cluster is involved.

The API server is an emulator (PyPI `kmock`, extended in `sandboxes_testing.kube_emulator`), and a
fake kubelet - also an emulator - runs each created pod's *real* agent binary on this machine with
the pod's own arguments, patches the pod's status (Running, Ready, podIP 127.0.0.1, the agent port
in an annotation, since every emulated pod shares 127.0.0.1) and kills the agent when the pod is
deleted. Everything the manager does on the data plane (exec, files, run_tests, leases) goes to
those agents directly, exactly as it would go to pod IPs.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from helpers import http_answering, pid_running, start_server_inside, wait_until
from sandboxes_testing.kube_emulator import (
    IMAGE_CRASH,
    IMAGE_PULL_ERROR,
    IMAGE_UNSCHEDULABLE,
    EmulatedApiServer,
    FakeKubelet,
    emulated_cluster,
    match_selector,
)
from terminals import drive_bash

import sandboxes
from sandboxes import Pool, Template, TestCase
from sandboxes.backends.kubernetes import (
    AGENT_CAPABILITIES,
    EGRESS_CAPABILITIES,
    LABEL_OWNER,
    LABEL_TEMPLATE,
    KubeConfig,
    KubernetesBackend,
    pod_readiness,
)
from sandboxes.backends.kubernetes.egress import policy_manifest as egress_policy_manifest
from sandboxes.errors import InvalidRequest, LaunchError, SandboxLost

IMAGE = "sandboxes/sandbox:test"
KT = Template(backend="kubernetes")  # default template, image from the backend config


class Cluster:
    """The emulated API server, the emulated kubelet and factories of backends / pools on them."""

    def __init__(self, api: EmulatedApiServer, kubelet: FakeKubelet, url: str) -> None:
        self.api = api
        self.kubelet = kubelet
        self.url = url
        self.pools: list[Pool] = []
        self.backends: list[KubernetesBackend] = []

    def backend(self, identity: str = "mgr-a", **cfg: Any) -> KubernetesBackend:
        cfg.setdefault("image", IMAGE)
        config = KubeConfig(api_url=self.url, identity=identity, port_from_annotation=True, **cfg)
        be = KubernetesBackend(config)
        self.backends.append(be)
        return be

    async def pool(self, backend: KubernetesBackend | None = None, **kwargs: Any) -> Pool:
        kwargs.setdefault("claim_timeout", 60.0)
        if "template" not in kwargs and "templates" not in kwargs:
            kwargs["template"] = KT
        p = Pool(backend=backend or self.backend(), **kwargs)
        self.pools.append(p)
        await p.start()
        return p

    def pods(self, **labels: str) -> list[dict[str, Any]]:
        sel = ",".join(f"{k}={v}" for k, v in labels.items())
        return [p for p in self.api.objects_of("pods") if match_selector(sel, p["metadata"].get("labels"))]

    def pod(self, name: str) -> dict[str, Any] | None:
        return next((p for p in self.api.objects_of("pods") if p["metadata"]["name"] == name), None)


@pytest_asyncio.fixture
async def cluster(native: Any) -> AsyncIterator[Cluster]:
    async with emulated_cluster() as (api, kubelet, url):
        c = Cluster(api, kubelet, url)
        try:
            yield c
        finally:
            for p in c.pools:
                await p.close()
            for b in c.backends:
                await b.close()


def warm(pool: Pool, template: str = "default") -> int:
    return pool.stats()[template]["warm"]


# --- the pod itself ----------------------------------------------------------------------------------


def test_pod_manifest_is_locked_down() -> None:
    be = KubernetesBackend(
        KubeConfig(
            image=IMAGE,
            identity="mgr-a",
            runtime_class_name="gvisor",
            node_selector={"pool": "sandbox"},
            tolerations=[{"key": "sandbox", "operator": "Exists", "effect": "NoSchedule"}],
            labels={"team": "rl"},
        )
    )
    t = Template(backend="kubernetes", memory_bytes=256 << 20, cpu_quota=0.5, env={"A": "1"}, lease_ttl_s=20)
    pod = be.pod_manifest(t, "sb-1", "sb-1", "secret-token-value-123")
    spec = pod["spec"]
    c = spec["containers"][0]
    sc = c["securityContext"]
    assert spec["restartPolicy"] == "Never"
    assert spec["automountServiceAccountToken"] is False
    assert spec["hostUsers"] is False
    assert spec["runtimeClassName"] == "gvisor"
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert sc["allowPrivilegeEscalation"] is False and sc["privileged"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"] == {"drop": ["ALL"], "add": list(AGENT_CAPABILITIES)}
    assert "SYS_ADMIN" not in AGENT_CAPABILITIES and "NET_ADMIN" not in AGENT_CAPABILITIES
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    assert set(mounts) == {"/work", "/tmp", "/var/run/sandboxes"} and mounts["/var/run/sandboxes"]["readOnly"]
    vols = {v["name"]: v for v in spec["volumes"]}
    assert "emptyDir" in vols["work"] and "emptyDir" in vols["tmp"]
    assert vols["token"]["secret"]["defaultMode"] == 0o400
    assert vols["token"]["secret"]["items"][0]["mode"] == 0o400
    # The token is only in the Secret, never in the pod spec.
    assert "secret-token-value-123" not in repr(pod)
    assert c["args"][:2] == ["--listen", "tcp:0.0.0.0:7000"]
    assert "--token-file" in c["args"] and "--lease-ttl" in c["args"] and "A=1" in c["args"]
    assert c["resources"]["limits"] == {"memory": str(256 << 20), "cpu": "500m"}
    assert spec["nodeSelector"] == {"pool": "sandbox"}
    keys = [t["key"] for t in spec["tolerations"]]
    assert keys == ["sandbox", "node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready"]
    labels = pod["metadata"]["labels"]
    assert labels["sandboxes.io/pool"] == "sandboxes" and labels["sandboxes.io/manager"] == "mgr-a"
    assert labels[LABEL_OWNER] == be.owner and labels["team"] == "rl"
    assert "sandboxes.io/egress" not in labels
    assert (
        be.pod_manifest(t.replace(network=True), "sb-2", "sb-2", "x" * 20)["metadata"]["labels"][
            "sandboxes.io/egress"
        ]
        == "allowed"
    )


def test_pod_manifest_validates_against_the_kubernetes_schema() -> None:
    import kubernetes_validate as kv

    be = KubernetesBackend(KubeConfig(image=IMAGE, identity="m", runtime_class_name="gvisor"))
    pod = be.pod_manifest(Template(backend="kubernetes", memory_bytes=64 << 20), "sb-1", "sb-1", "t" * 32)
    kv.validate(pod, "1.33.0", strict=True)
    kv.validate(be._secret_manifest("sb-1", "uid-1", "t" * 32), "1.33.0", strict=True)
    env_mode = KubernetesBackend(KubeConfig(image=IMAGE, identity="m", token_mode="env", host_users=None))
    pod = env_mode.pod_manifest(Template(backend="kubernetes"), "sb-2", "sb-2", "t" * 32)
    assert "hostUsers" not in pod["spec"] and not any(v["name"] == "token" for v in pod["spec"]["volumes"])
    kv.validate(pod, "1.33.0", strict=True)


def test_a_root_pod() -> None:
    """A root template's pod is user-namespaced and carries what its agent needs to build the
    sandbox's root (tests/test_root_sandbox.py runs it on the emulated cluster); without
    user-namespaced pods it is refused, since the pod's root would be the node's."""
    import kubernetes_validate as kv

    be = KubernetesBackend(KubeConfig(image=IMAGE, identity="m"))
    t = Template(backend="kubernetes", user="root", root_size_bytes=64 << 20)
    pod = be.pod_manifest(t, "sb-1", "sb-1", "t" * 32)
    kv.validate(pod, "1.33.0", strict=True)
    c = pod["spec"]["containers"][0]
    sc = c["securityContext"]
    assert pod["spec"]["hostUsers"] is False
    assert sc["capabilities"]["add"] == [*AGENT_CAPABILITIES, "SYS_ADMIN", "SETFCAP"]
    assert sc["procMount"] == "Unmasked" and sc["appArmorProfile"] == {"type": "Unconfined"}
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    args = c["args"]
    assert {"--pod-ids", "--new-root"} <= set(args)
    assert args[args.index("--user") + 1] == "root" and args[args.index("--image-root") + 1] == "/"
    assert args[args.index("--root-size") + 1] == str(64 << 20)
    assert "--outside-dns" not in args  # no network: no resolver; with one, the cluster's
    assert (
        "--outside-dns"
        in be.pod_manifest(t.replace(network=True), "sb-4", "sb-4", "t" * 32)["spec"]["containers"][0]["args"]
    )
    for host_users in (None, True):
        other = KubernetesBackend(KubeConfig(image=IMAGE, identity="m", host_users=host_users))
        with pytest.raises(InvalidRequest, match="user-namespaced"):
            other.pod_manifest(t, "sb-2", "sb-2", "t" * 32)
    plain = be.pod_manifest(Template(backend="kubernetes"), "sb-3", "sb-3", "t" * 32)
    assert "procMount" not in plain["spec"]["containers"][0]["securityContext"]


@pytest.mark.requires("root", reason="the agent's user namespace needs a kubelet that is root")
async def test_a_root_pod_without_a_user_namespace_does_not_start(cluster: Cluster) -> None:
    """A node that ignores `hostUsers: false` (the emulated kubelet's default mode runs every pod
    with this machine's ids) would make the pod's root the node's: the agent refuses to start, and
    the create fails with its reason."""
    root = Template(name="root", backend="kubernetes", user="root", warm=0)
    pool = await cluster.pool(templates={"default": KT, "root": root})
    with pytest.raises(LaunchError, match="needs a user-namespaced pod"):
        await pool.claim("root", timeout=30)
    async with pool.sandbox("default") as sb:
        assert (await sb.exec(["true"])).exit_code == 0


def test_an_allow_list_pod_and_its_network_policy() -> None:
    """An allow-list template's pod carries the rules to its agent, the capabilities the agent
    needs to enforce them in the pod, and the label of the list's own NetworkPolicy, which lets
    the pod reach what the address rules name, the public internet on the name rules' ports and
    the cluster's DNS, and validates against the Kubernetes schema."""
    import kubernetes_validate as kv

    cfg = KubeConfig(image=IMAGE, identity="m", pool="rl")
    be = KubernetesBackend(cfg)
    rules = ("pypi.org:443", "*.pythonhosted.org:443", "10.1.2.3/16:8080", "[fd00::5]")
    t = Template(backend="kubernetes", network=rules)
    pod = be.pod_manifest(t, "sb-1", "sb-1", "t" * 32)
    c = pod["spec"]["containers"][0]
    assert [c["args"][i + 1] for i, a in enumerate(c["args"]) if a == "--egress-rule"] == list(rules)
    assert c["securityContext"]["capabilities"]["add"] == [*AGENT_CAPABILITIES, *EGRESS_CAPABILITIES]
    labels = pod["metadata"]["labels"]
    assert labels["sandboxes.io/egress"] == "allow-list"  # not the chart's `allowed` (the internet)
    np = egress_policy_manifest(cfg, rules)
    assert match_selector(
        ",".join(f"{k}={v}" for k, v in np["spec"]["podSelector"]["matchLabels"].items()), labels
    )
    other = egress_policy_manifest(cfg, (*rules, "example.com:80"))
    assert other["metadata"]["name"] != np["metadata"]["name"]
    odd_pool = egress_policy_manifest(KubeConfig(image=IMAGE, identity="m", pool="RL_pool.v2"), rules)
    assert odd_pool["metadata"]["name"].startswith("rl-pool-v2-egress-")
    assert np["spec"]["policyTypes"] == ["Egress"]
    to_nets, to_public, to_dns = (
        np["spec"]["egress"][:2],
        np["spec"]["egress"][2],
        np["spec"]["egress"][3],
    )
    assert to_nets == [
        {"to": [{"ipBlock": {"cidr": "10.1.0.0/16"}}], "ports": [{"port": 8080, "protocol": "TCP"}]},
        {"to": [{"ipBlock": {"cidr": "fd00::5/128"}}]},
    ]
    assert to_public["ports"] == [{"port": 443, "protocol": "TCP"}]
    v4, v6 = (b["ipBlock"] for b in to_public["to"])
    assert v4["cidr"] == "0.0.0.0/0" and {"10.0.0.0/8", "169.254.0.0/16", "127.0.0.0/8"} <= set(v4["except"])
    assert v6["cidr"] == "::/0" and "fc00::/7" in v6["except"]
    assert to_dns["to"][0]["podSelector"] == {"matchLabels": {"k8s-app": "kube-dns"}}
    kv.validate(np, "1.33.0", strict=True)
    kv.validate(pod, "1.33.0", strict=True)
    # A name rule without a port opens every port of the public internet.
    assert "ports" not in egress_policy_manifest(cfg, ("pypi.org",))["spec"]["egress"][0]
    # A deny-list's pods may reach the public internet on every port (the agent refuses what the
    # list names) and the cluster's DNS; its policy is not the allow-list's of the same rules.
    deny = egress_policy_manifest(cfg, ("pypi.org:443",), deny=True)
    assert deny["metadata"]["name"] != egress_policy_manifest(cfg, ("pypi.org:443",))["metadata"]["name"]
    public, dns = deny["spec"]["egress"]
    assert "ports" not in public and public["to"] == to_public["to"] and dns == to_dns
    kv.validate(deny, "1.33.0", strict=True)


@pytest.mark.requires("root", reason="the agent's egress set-up needs a kubelet that is root")
async def test_an_allow_list_is_enforced_in_the_pod(cluster: Cluster) -> None:
    """On the emulated cluster (each pod's agent a process of this machine, as root), an
    allow-list sandbox's programs reach the server the list names through the agent's proxy and
    nothing else: not a second server, not a direct connection; the pod's own nameserver (this
    host's /etc/resolv.conf, which a pod's programs keep) is the agent's DNS, which answers the
    list's names only; the list's NetworkPolicy is made once, before the first pod, and selects
    its pods."""
    replies: list[str] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        replies.append(head.split(b"\r\n")[0].decode())
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\nConnection: close\r\n\r\nallowed")
        await writer.drain()
        writer.close()

    allowed = await asyncio.start_server(serve, "127.0.0.2", 0)
    other = await asyncio.start_server(serve, "127.0.0.2", 0)
    port, other_port = (srv.sockets[0].getsockname()[1] for srv in (allowed, other))
    try:
        t = Template(name="egress", backend="kubernetes", network=(f"127.0.0.2:{port}", "allowed.test"))
        be = cluster.backend()
        pool = await cluster.pool(be, templates={"egress": t}, warm=0)
        script = (
            "import socket, urllib.request, urllib.error\n"
            "def get(url):\n"
            "    try:\n"
            "        return urllib.request.urlopen(url, timeout=20).read().decode()\n"
            "    except urllib.error.HTTPError as e:\n"
            "        return str(e.code)\n"
            f"print(get('http://127.0.0.2:{port}/x'), get('http://127.0.0.2:{other_port}/'))\n"
            "try:\n"
            f"    socket.create_connection(('127.0.0.2', {port}), timeout=5); print('direct')\n"
            "except OSError as e:\n"
            "    print(type(e).__name__)\n"
            "def lookup(name):\n"
            "    try:\n"
            "        return ','.join(sorted({a[4][0] for a in socket.getaddrinfo(name, 80, socket.AF_INET)}))\n"
            "    except OSError as e:\n"
            "        return type(e).__name__\n"
            "print(lookup('allowed.test'), lookup('unlisted.example'))\n"
        )
        async with pool.sandbox("egress") as sb, pool.sandbox("egress") as sb2:
            r = await sb.exec(["python3", "-c", script], timeout=60)
            want = b"allowed 403\nConnectionRefusedError\n127.77.0.1 gaierror\n"
            assert (r.exit_code, r.stdout) == (0, want), r
            info = await sb.info()
            pods = [cluster.pod(sb.id), cluster.pod(sb2.id)]
    finally:
        allowed.close()
        other.close()
    assert replies == ["GET /x HTTP/1.1"]
    assert (info.egress_allowed, info.egress_refused) == (1, 1)
    policies = cluster.api.objects_of("networkpolicies")
    want = egress_policy_manifest(be.cfg, t.egress_allow)
    assert [(p["metadata"]["name"], p["spec"]) for p in policies] == [
        (want["metadata"]["name"], want["spec"])
    ]
    selector = ",".join(f"{k}={v}" for k, v in policies[0]["spec"]["podSelector"]["matchLabels"].items())
    assert all(p is not None and match_selector(selector, p["metadata"]["labels"]) for p in pods)


@pytest.mark.requires("root", reason="the agent's egress set-up needs a kubelet that is root")
async def test_the_policy_changes_while_the_pod_runs(cluster: Cluster) -> None:
    """On the emulated cluster, a pod's policy replaced while it runs (`set_network`, the pod's
    agent's SetEgress): a narrower allow-list refuses at once what it no longer names, a
    deny-list opens the public internet (never this host's loopback), the first list again
    reaches both servers; each time the pod is moved under the NetworkPolicy of its
    new list first (made then, selecting the pod by its label), so that a real cluster's fence
    never refuses what the agent lets out. (The emulator keeps NetworkPolicies but does not
    enforce them: the agent's proxy does here.)"""
    script = (
        "import sys, urllib.request, urllib.error\n"
        "for u in sys.argv[1:]:\n"
        "    try:\n"
        "        print(urllib.request.urlopen(u, timeout=20).read().decode())\n"
        "    except urllib.error.HTTPError as e:\n"
        "        print(e.code)\n"
    )

    def fenced_by(sandbox_id: str, rules: tuple[str, ...], deny: bool) -> bool:
        """The pod's labels are selected by the NetworkPolicy of `rules` (which exists)."""
        want = egress_policy_manifest(be.cfg, rules, deny)
        made = [
            p
            for p in cluster.api.objects_of("networkpolicies")
            if p["metadata"]["name"] == want["metadata"]["name"]
        ]
        pod = cluster.pod(sandbox_id)
        selector = ",".join(f"{k}={v}" for k, v in want["spec"]["podSelector"]["matchLabels"].items())
        return len(made) == 1 and pod is not None and match_selector(selector, pod["metadata"]["labels"])

    async with http_answering(b"ok") as (pa, _), http_answering(b"ok") as (pb, _):
        urls = [f"http://127.0.0.2:{pa}/", f"http://127.0.0.2:{pb}/"]
        t = Template(name="egress", backend="kubernetes", network=(f"127.0.0.2:{pa}", f"127.0.0.2:{pb}"))
        be = cluster.backend()
        pool = await cluster.pool(be, templates={"egress": t}, warm=0)
        async with pool.sandbox("egress") as sb:
            r = await sb.exec(["python3", "-c", script, *urls], timeout=60)
            assert r.stdout == b"ok\nok\n", r
            narrow = await sb.set_network(allow=[f"127.0.0.2:{pa}"])
            r = await sb.exec(["python3", "-c", script, *urls], timeout=60)
            assert r.stdout == b"ok\n403\n", r
            assert fenced_by(sb.id, narrow.rules, False)
            wide = await sb.set_network(deny=["blocked.example"])
            assert fenced_by(sb.id, wide.rules, True)
            # A deny-list opens public destinations only: this host's loopback stays refused.
            r = await sb.exec(["python3", "-c", script, *urls], timeout=60)
            assert r.stdout == b"403\n403\n", r
            await sb.set_network(allow=[f"127.0.0.2:{pa}", f"127.0.0.2:{pb}"])
            r = await sb.exec(["python3", "-c", script, *urls], timeout=60)
            assert r.stdout == b"ok\nok\n", r
            assert fenced_by(sb.id, t.egress_allow, False)
        names = {p["metadata"]["name"] for p in cluster.api.objects_of("networkpolicies")}
        assert names == {
            egress_policy_manifest(be.cfg, rules, deny)["metadata"]["name"]
            for rules, deny in [(t.egress_allow, False), (narrow.rules, False), (wide.rules, True)]
        }


def test_invalid_backend_config_is_refused() -> None:
    with pytest.raises(InvalidRequest, match="quantity"):
        KubeConfig(resources={"limits": {"memory": "lots"}}).validate()
    with pytest.raises(InvalidRequest, match="unknown kubernetes backend setting"):
        KubeConfig.from_mapping({"imagee": "x"})
    with pytest.raises(InvalidRequest, match="label"):
        KubeConfig(node_selector={"bad key!": "x"}).validate()
    assert KubeConfig.from_mapping({"runtimeClassName": "gvisor", "agentPort": 7001}).agent_port == 7001
    be = KubernetesBackend(KubeConfig(identity="m"))  # no default image
    with pytest.raises(InvalidRequest, match="no image"):
        be.pod_manifest(Template(backend="kubernetes"), "sb-1", "sb-1", "t" * 32)
    with pytest.raises(InvalidRequest, match="ro_binds"):
        be.pod_manifest(
            Template(backend="kubernetes", image=IMAGE, ro_binds=("/opt",)), "sb-1", "sb-1", "t" * 32
        )


def test_readiness_states() -> None:
    base = {"metadata": {"name": "p"}}
    assert pod_readiness(None)[0] == "gone"
    assert pod_readiness({**base, "status": {"phase": "Pending"}})[0] == "pending"
    running = {
        **base,
        "status": {
            "phase": "Running",
            "podIP": "10.0.0.5",
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    assert pod_readiness(running) == ("ready", "10.0.0.5")
    no_ip = {**base, "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
    assert pod_readiness(no_ip)[0] == "pending"
    backoff = {
        **base,
        "status": {
            "phase": "Pending",
            "containerStatuses": [
                {"name": "agent", "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}}}
            ],
        },
    }
    assert pod_readiness(backoff) == ("failed", "container CrashLoopBackOff: back-off")
    deleting = {"metadata": {"name": "p", "deletionTimestamp": "now"}, "status": running["status"]}
    assert pod_readiness(deleting)[0] == "gone"


# --- against the emulated cluster ---------------------------------------------------------------------


async def test_bulk_prewarm_claim_exec_files_and_tests(cluster: Cluster) -> None:
    be = cluster.backend()
    pool = await cluster.pool(be, warm=6)
    await wait_until(lambda: warm(pool) == 6, timeout=60, what="6 warm pods")
    pods = cluster.pods(**{LABEL_OWNER: be.owner})
    assert len(pods) == 6 and all(p["status"]["phase"] == "Running" for p in pods)
    assert len(cluster.api.objects_of("secrets")) == 6
    assert len(cluster.kubelet.agents) == 6

    async with pool.sandbox(env={"ANSWER": "42"}, files={"in/x.txt": b"payload"}) as sb:
        assert sb.endpoint.startswith("http://127.0.0.1:")
        r = await sb.exec("id -u; echo $ANSWER; cat in/x.txt")
        assert r.exit_code == 0 and r.stdout == b"65534\n42\npayload", r.stderr
        await sb.write_file("prog.py", "print(input()[::-1])")
        assert await sb.read_file("prog.py") == b"print(input()[::-1])"
        r = await sb.exec(["python3", "prog.py"], stdin=b"abc", timeout=10)
        assert r.stdout == b"cba\n", r.stderr
        timed = await sb.exec("sleep 5", timeout=0.3)
        assert timed.timed_out
        report = await sb.run_tests(
            "print(int(input()) * 2)",
            [TestCase("2", "4"), TestCase("3", "7")],
            language="python",
            time_limit=5,
        )
        assert [c.verdict.value for c in report.cases] == ["accepted", "wrong_answer"]
        # The agent's token is a root-only file: sandboxed code cannot read it.
        pod = sb.id
        token_file = os.path.join(cluster.kubelet.agents[pod].dir, "token")
        r = await sb.exec(["cat", token_file])
        assert r.exit_code != 0 and b"Permission denied" in r.stderr
    # Released: its pod, secret and agent are gone; the pool refilled.
    await wait_until(lambda: cluster.pod(pod) is None, what="deleted pod")
    await wait_until(lambda: pod not in cluster.kubelet.agents, what="agent stopped")
    assert not any(s["metadata"]["name"] == f"{pod}-token" for s in cluster.api.objects_of("secrets"))
    await wait_until(lambda: warm(pool) == 6, timeout=60, what="refill")


async def test_a_shell_on_a_terminal_in_a_pod(cluster: Cluster) -> None:
    """`bash -i` on a pseudo-terminal of the pod's agent (emulated cluster: the emulator's
    kubelet runs the pod's agent on this host), straight to the agent with no API call."""
    pool = await cluster.pool(warm=1)
    async with pool.sandbox() as sb:
        await drive_bash(sb)


async def test_delete_ends_the_agent(cluster: Cluster) -> None:
    pool = await cluster.pool(warm=1)
    sb = await pool.claim()
    pid = cluster.kubelet.agent_pid(sb.id)
    assert pid and pid_running(pid)
    await sb.close()
    await wait_until(lambda: not pid_running(pid), what="agent exit")
    assert cluster.pod(sb.id) is None
    with pytest.raises(SandboxLost):
        await sb.exec(["true"])


async def test_a_pod_the_watch_has_not_reported_yet_is_waited_for(cluster: Cluster) -> None:
    """A create whose pod the watch reports later than the API server answers the create (the
    EMULATED API server holds every watch event back) waits for it instead of calling it
    deleted."""
    pool = await cluster.pool(warm=0)
    cluster.api.watch_lag_s = 1.0
    sb = await pool.claim()
    assert (await sb.exec(["echo", "up"])).stdout == b"up\n"
    cluster.api.watch_lag_s = 0.0
    await sb.close()
    await wait_until(lambda: cluster.pod(sb.id) is None, what="pod deleted")


async def test_zero_api_requests_while_1000_execs_run_on_warm_pods(cluster: Cluster) -> None:
    be = cluster.backend()
    pool = await cluster.pool(be, warm=4)
    sbs = [await pool.claim() for _ in range(4)]
    # The pool refills behind the claims (API calls of the control plane); measure once it is idle.
    await wait_until(
        lambda: warm(pool) == 4 and pool.stats()["default"]["creating"] == 0, timeout=60, what="refill done"
    )
    before, before_backend = cluster.api.request_count(), be.api_requests
    sem = asyncio.Semaphore(64)

    async def one(i: int) -> int:
        async with sem:
            return (await sbs[i % 4].exec(["/bin/true"])).exit_code

    codes = await asyncio.gather(*(one(i) for i in range(1000)))
    during = cluster.api.request_count() - before
    assert codes == [0] * 1000
    print(f"\nAPI server requests during 1000 execs on 4 warm pods: {during}")
    assert during == 0, cluster.api.requests_since(before)
    assert be.api_requests == before_backend
    for sb in sbs:
        await sb.close()


async def test_pod_vanishing_mid_exec_is_lost_and_replaced(cluster: Cluster) -> None:
    pool = await cluster.pool(warm=2)
    await wait_until(lambda: warm(pool) == 2, timeout=60, what="warm pods")
    sb = await pool.claim()
    running = asyncio.ensure_future(sb.exec(["sleep", "30"]))
    await wait_until(lambda: _running_execs(sb), timeout=10, what="exec running")
    await cluster.kubelet.vanish(sb.id)
    with pytest.raises(SandboxLost):
        await running
    # The connection dropped first; the watch's DELETED event marks the pod lost right after.
    await wait_until(lambda: not sb.handle.backend_data.alive(), what="pod marked lost")
    await sb.close()
    # A warm pod that vanishes is replaced without anybody claiming.
    lost_before = pool.stats()["default"]["lost_total"]
    victim = pool._tps["default"].warm[0].id
    await cluster.kubelet.vanish(victim)
    await wait_until(lambda: pool.stats()["default"]["lost_total"] > lost_before, what="lost noticed")
    await wait_until(
        lambda: warm(pool) == 2 and victim not in [s.id for s in pool._tps["default"].warm],
        timeout=60,
        what="replacement",
    )
    async with pool.sandbox() as again:
        assert (await again.exec(["true"])).exit_code == 0


async def _running_execs(sb: sandboxes.Sandbox) -> bool:
    return (await sb.info()).running_execs >= 1


async def test_manager_restart_reaps_orphans_and_leases_end_pods(cluster: Cluster) -> None:
    be = cluster.backend("mgr-x")
    await be.reap_orphans()
    short = KT.replace(lease_ttl_s=1.0)
    for i in range(3):
        await be.create(KT if i else short, f"sb-orphan{i}")
    agents = {n: cluster.kubelet.agent_pid(n) for n in ("sb-orphan0", "sb-orphan1", "sb-orphan2")}
    await _crash(be)  # the manager dies: nobody renews leases, nobody deletes pods
    # The short-lease agent exits by itself and its pod ends (restartPolicy Never).
    await wait_until(
        lambda: (cluster.pod("sb-orphan0") or {}).get("status", {}).get("phase") == "Succeeded",
        timeout=30,
        what="lease lapse ends the pod",
    )
    # The restarted manager (same identity, new owner id) reaps all three.
    again = cluster.backend("mgr-x")
    assert again.owner != be.owner
    assert await again.reap_orphans() == 3
    assert cluster.pods(**{"sandboxes.io/manager": "mgr-x"}) == []
    await wait_until(lambda: not any(p and pid_running(p) for p in agents.values()), what="agents gone")
    assert cluster.api.objects_of("secrets") == []


async def _crash(be: KubernetesBackend) -> None:
    """Simulate a manager crash: stop its watch and connections without deleting anything."""
    be.pods.live.clear()
    await be.pods.stop()
    await be.api.close()


async def test_two_managers_each_own_their_pods(cluster: Cluster) -> None:
    # Manager B runs "in a pod": its pods carry its pod's name and uid, so others can tell when
    # B is gone. The manager pod is an object of the emulated API server.
    async with cluster.kubelet._api(
        "POST",
        "/api/v1/namespaces/default/pods",
        json={
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "mgr-b", "namespace": "default"},
            "spec": {"containers": [{"name": "manager", "image": "sandboxes/manager"}]},
        },
    ) as r:
        manager_pod = await r.json()
    be_a = cluster.backend("mgr-a")
    be_b = cluster.backend("mgr-b", manager_pod="default/mgr-b", manager_uid=manager_pod["metadata"]["uid"])
    pool_a = await cluster.pool(be_a, warm=2)
    pool_b = await cluster.pool(be_b, warm=2)
    await wait_until(lambda: warm(pool_a) == 2 and warm(pool_b) == 2, timeout=60, what="both warm")
    pods_a = {p["metadata"]["name"] for p in cluster.pods(**{LABEL_OWNER: be_a.owner})}
    pods_b = {p["metadata"]["name"] for p in cluster.pods(**{LABEL_OWNER: be_b.owner})}
    assert len(pods_a) == 2 and len(pods_b) == 2 and not pods_a & pods_b
    # Each watch sees only its own pods.
    assert set(be_a.pods.mine) == pods_a and set(be_b.pods.mine) == pods_b
    # A reaping while B lives touches nothing of B's.
    assert await be_a.reap_orphans() == 0
    assert {p["metadata"]["name"] for p in cluster.pods(**{LABEL_OWNER: be_b.owner})} == pods_b
    # One of B's pods vanishes: B replaces it, A does not notice.
    victim = min(pods_b)
    await cluster.kubelet.vanish(victim)
    await wait_until(lambda: pool_b.stats()["default"]["lost_total"] == 1, what="B noticed")
    await wait_until(lambda: warm(pool_b) == 2, timeout=60, what="B refilled")
    assert pool_a.stats()["default"]["lost_total"] == 0 and warm(pool_a) == 2
    # Claims on A still work while B churns.
    async with pool_a.sandbox() as sb:
        assert (await sb.exec(["true"])).exit_code == 0
    # B dies with its pod deleted: now A may reap B's leftovers.
    live_b = {p["metadata"]["name"] for p in cluster.pods(**{LABEL_OWNER: be_b.owner})}
    await _crash(be_b)
    pool_b._closing = True  # the dead manager's pool does not get to clean up
    for t in pool_b._tasks:
        t.cancel()
    cluster.pools.remove(pool_b)
    async with cluster.kubelet._api("DELETE", "/api/v1/namespaces/default/pods/mgr-b") as r:
        assert r.status == 200
    assert await be_a.reap_orphans() == len(live_b)
    assert cluster.pods(**{LABEL_OWNER: be_b.owner}) == []
    assert {p["metadata"]["name"] for p in cluster.pods(**{LABEL_OWNER: be_a.owner})} >= {
        s.id for s in pool_a._tps["default"].warm
    }


async def test_invalid_template_fails_fast_and_the_pool_keeps_serving(cluster: Cluster) -> None:
    be = cluster.backend(image=None)  # no default image
    good = Template(name="good", backend="kubernetes", image=IMAGE)
    bad = Template(name="bad", backend="kubernetes", warm=0)  # no image anywhere
    pool = await cluster.pool(be, warm=1, templates={"good": good, "bad": bad})
    with pytest.raises(InvalidRequest, match="no image"):
        await pool.claim("bad", timeout=30)
    assert cluster.pods(**{LABEL_TEMPLATE: "bad"}) == []
    async with pool.sandbox("good") as sb:
        assert (await sb.exec(["true"])).exit_code == 0


@pytest.mark.parametrize(
    ("image", "expect"),
    [(IMAGE_PULL_ERROR, "ImagePullBackOff"), (IMAGE_CRASH, "exit code 1")],
)
async def test_pod_that_never_becomes_ready(cluster: Cluster, image: str, expect: str) -> None:
    be = cluster.backend()
    bad = Template(name="bad", backend="kubernetes", image=image, warm=0, create_timeout_s=30)
    pool = await cluster.pool(be, warm=1, templates={"good": KT.replace(name="good"), "bad": bad})
    with pytest.raises(LaunchError, match=expect) as info:
        await pool.claim("bad", timeout=30)
    assert info.value.step == "pod"
    # Every failed pod is deleted; the good template keeps serving meanwhile.
    async with pool.sandbox("good") as sb:
        assert (await sb.exec(["true"])).exit_code == 0
    await wait_until(lambda: cluster.pods(**{LABEL_TEMPLATE: "bad"}) == [], what="failed pods deleted")
    assert pool.stats()["bad"]["create_failures_total"] >= 3


async def test_unschedulable_pod_times_out_with_its_reason_and_is_deleted(cluster: Cluster) -> None:
    be = cluster.backend()
    t = Template(name="stuck", backend="kubernetes", image=IMAGE_UNSCHEDULABLE, create_timeout_s=1.0)
    with pytest.raises(LaunchError, match="Unschedulable") as info:
        await be.create(t, "sb-stuck")
    assert info.value.step == "ready_timeout"
    await wait_until(lambda: cluster.pod("sb-stuck") is None, what="stuck pod deleted")


async def test_api_server_down_is_backend_unavailable(native: Any) -> None:
    be = KubernetesBackend(
        KubeConfig(api_url="http://127.0.0.1:9", image=IMAGE, identity="m", api_timeout_s=2)
    )
    try:
        with pytest.raises(sandboxes.BackendUnavailable):
            await be.reap_orphans()
    finally:
        await be.close()


async def test_ports_of_a_pod_through_the_server(cluster: Cluster) -> None:
    """`serve --ports-port` on the emulated cluster: a server inside the pod reached through the
    ports listener and the pod's agent (`Forward`), with no Service and no API server call for
    the bytes. (The emulator's pods share this host's network namespace, so that nothing of a
    pod's listens on the host is a real cluster's property, not tested here.)"""
    import urllib.request

    from sandboxes.server.app import Server

    server = Server(
        backend=cluster.backend(),
        warm=0,
        port=0,
        insecure=True,
        ports_port=0,
        templates={"default": KT},
        pool_kwargs={"claim_timeout": 60},
    )
    await server.start()
    port = 38521
    try:
        async with sandboxes.AsyncSandboxClient(server.address) as client:
            sb = await client.create(timeout=60)
            await sb.write_file("page.txt", b"from the pod\n")
            work = (await sb.info()).work_dir
            await start_server_inside(
                sb, f"cd {work} && exec python3 -m http.server {port} --bind 127.0.0.1", port
            )
            url = await sb.port_url(port) + "page.txt"
            body = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=30).read())
            assert body == b"from the pod\n"
            assert cluster.api.objects_of("services") == []
            await sb.close()
    finally:
        # The emulator's pods are processes of this host, and a program left running outlives
        # its pod there (a real pod's end ends them all).
        await (await asyncio.create_subprocess_exec("pkill", "-f", f"http.server {port}")).wait()
        await server.stop(grace=1)


async def test_api_server_on_the_kubernetes_backend(cluster: Cluster) -> None:
    """`sandboxes serve --backend kubernetes`, in process: a remote client creates and execs."""
    from sandboxes.server.app import Server

    server = Server(
        backend=cluster.backend(),
        warm=1,
        port=0,
        insecure=True,
        templates={"default": KT},
        pool_kwargs={"claim_timeout": 60},
    )
    await server.start()
    try:
        async with sandboxes.AsyncSandboxClient(server.address) as client:
            sb = await client.create(timeout=60)
            r = await sb.exec(["sh", "-c", "echo remote; id -u"])
            assert r.stdout == b"remote\n65534\n", r.stderr
            await sb.close()
    finally:
        await server.stop(grace=1)
    assert cluster.pods(**{"sandboxes.io/manager": "mgr-a"}) == []
