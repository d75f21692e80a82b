"""`KubernetesBackend`: creates, watches and deletes the pods of one manager (the package's
docstring says how)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import secrets
import socket
from collections.abc import Callable, Mapping
from typing import Any

from ... import _bridge
from ...egress import EgressPolicy
from ...errors import BackendUnavailable, InvalidRequest, LaunchError, SandboxError, SandboxLost
from ...templates import Template
from ..base import Backend, LostListener, SandboxHandle
from . import manifests
from .api import _Api, _api_failure, _ApiError
from .claims import ClusterRecords
from .config import (
    _DNS_LABEL,
    ANN_MANAGER_POD,
    ANN_MANAGER_UID,
    ANN_REPLICA_LEASE,
    CONFIG_ENV,
    LABEL_MANAGER,
    LABEL_OWNER,
    LABEL_POOL,
    KubeConfig,
    _label_value,
)
from .egress import LABEL_EGRESS_POLICY, policy_digest
from .egress import policy_manifest as egress_policy_manifest
from .layered import LayeredImages
from .pod_cache import PodCache
from .pods import PodRef, _Starting, pod_readiness
from .volume_claims import CLAIM_PREFIX, claim_manifest

log = logging.getLogger(__name__)


def create_backend(
    pool_id: str | None = None, config: KubeConfig | Mapping[str, Any] | None = None, **overrides: Any
) -> KubernetesBackend:
    """Factory used by `sandboxes.backends.get_backend`: config from `config`, else the JSON file
    named by `$SANDBOXES_KUBE_CONFIG`, else defaults; `overrides` replace single fields."""
    if config is None:
        path = os.environ.get(CONFIG_ENV)
        cfg = KubeConfig.from_file(path) if path else KubeConfig()
    elif isinstance(config, KubeConfig):
        cfg = config
    else:
        cfg = KubeConfig.from_mapping(config)
    if overrides:
        cfg = dataclasses.replace(cfg, **overrides)
        cfg.validate()
    return KubernetesBackend(cfg, pool_id=pool_id)


class KubernetesBackend(Backend):
    """Sandboxes as pods; see the module docstring. One watch per backend (`pod_cache.py`),
    direct gRPC to pods."""

    name = "kubernetes"
    volumes = True
    volume_claims = True
    volume_claim_prefix = CLAIM_PREFIX
    no_checkpoints_why = (
        "its checkpoints go through the cluster's registry, and none is configured: registry_url"
    )

    def __init__(
        self,
        config: KubeConfig | None = None,
        pool_id: str | None = None,
        *,
        token_factory: Callable[[], str] | None = None,
    ) -> None:
        cfg = config or KubeConfig()
        cfg.validate()
        self.cfg = cfg
        self.pool_id = pool_id or secrets.token_hex(6)
        ident = (
            cfg.identity
            or os.environ.get("SANDBOXES_MANAGER_ID")
            or os.environ.get("POD_NAME")
            or socket.gethostname()
        )
        self.identity = _label_value(ident, 50)
        self.owner = _label_value(f"{self.identity}-{self.pool_id}")
        pod_ns, pod_name = os.environ.get("POD_NAMESPACE"), os.environ.get("POD_NAME")
        self.manager_pod = cfg.manager_pod or (f"{pod_ns}/{pod_name}" if pod_ns and pod_name else None)
        self.manager_uid = cfg.manager_uid or os.environ.get("POD_UID")
        self.create_concurrency = cfg.create_concurrency  # hint read by the pool
        # Tests / benchmarks may fix the token (shared emulated agents); secrets.token_urlsafe otherwise.
        self._token_factory = token_factory or (lambda: secrets.token_urlsafe(32))
        self.api = _Api(cfg)
        self.pods = PodCache(self.api, cfg, self.owner)
        self.pods.listeners.append(self._evaluate)
        self._starting: dict[str, _Starting] = {}
        self._egress_policies: set[str] = set()  # NetworkPolicies known to exist
        # The release's claimed sandboxes, shared by its replicas (`KubeConfig.shared`).
        who = manifests.Owner(self.identity, self.owner, self.manager_pod, self.manager_uid)
        self.records: ClusterRecords | None = (
            ClusterRecords(self.api, cfg, self.pods, who) if cfg.shared else None
        )
        self._bg: set[asyncio.Task[Any]] = set()
        self._lost_listener: LostListener | None = None
        # Checkpoints, when the cluster has a registry: their layers on the template's image.
        self.layered = LayeredImages(cfg.registry_url) if cfg.registry_url else None
        self.checkpoints = self.layered_volumes = self.layered is not None

    def __repr__(self) -> str:
        return f"kubernetes(namespace={self.cfg.namespace}, owner={self.owner})"

    # --- wiring ----------------------------------------------------------------------------------

    @property
    def watch_restarts(self) -> int:
        return self.pods.restarts

    def set_lost_listener(self, fn: LostListener | None) -> None:
        """`fn(sandbox_id, reason)` is called (on the loop) when a live sandbox's pod goes away."""
        self._lost_listener = fn

    @property
    def api_requests(self) -> int:
        """API requests this backend sent so far (the watch counts once per (re)connection)."""
        return self.api.requests

    async def _ensure_egress_policy(self, rules: tuple[str, ...], deny: bool = False) -> None:
        """The NetworkPolicy of allow- (or deny-) list `rules` exists (made once; named by the
        list, so one another replica made is the same)."""
        manifest = egress_policy_manifest(self.cfg, rules, deny)
        name = manifest["metadata"]["name"]
        if name in self._egress_policies:
            return
        try:
            await self.api.request(
                "POST",
                f"/apis/networking.k8s.io/v1/namespaces/{self.cfg.namespace}/networkpolicies",
                body=manifest,
            )
        except _ApiError as e:
            if e.status != 409:
                raise _api_failure(e, f"creating the NetworkPolicy {name}") from e
        self._egress_policies.add(name)

    async def set_egress(self, handle: SandboxHandle, policy: EgressPolicy) -> None:
        """Moves the pod under the NetworkPolicy of `policy` (made if missing): its label names
        the policy's list. Made before the agent's own policy changes, so that what the agent
        lets out is never fenced off by the cluster; the NetworkPolicy of the old list stays
        for the other pods that have it (policies are few: one per list)."""
        await self._ensure_egress_policy(policy.rules, policy.deny)
        ref = handle.backend_data
        name = ref.name if isinstance(ref, PodRef) else handle.id.lower()
        body = {"metadata": {"labels": {LABEL_EGRESS_POLICY: policy_digest(policy.rules, policy.deny)}}}
        try:
            await self.api.request(
                "PATCH", f"{self.pods.path}/{name}", body=body, content_type="application/merge-patch+json"
            )
        except _ApiError as e:
            raise _api_failure(e, f"labelling the pod {name} with its egress policy") from e

    def live_pods(self) -> list[str]:
        return sorted(self.pods.live)

    # --- Backend protocol ------------------------------------------------------------------------

    async def create(self, template: Template, sandbox_id: str) -> SandboxHandle:
        """Create the pod (and its token Secret), wait for the watch to report it ready, then for
        its agent to answer. On any failure or cancellation the pod is deleted."""
        pod_name = sandbox_id.lower()
        if len(pod_name) > 63 or not _DNS_LABEL.match(pod_name):
            raise InvalidRequest(f"sandbox id {sandbox_id!r} is not a valid pod name")
        volume_layers = [dirs for _, _, dirs in template.layered_volumes]
        if template.layers or any(volume_layers):
            if self.layered is None:
                raise InvalidRequest("sandboxes from checkpoints need the cluster's registry (registry_url)")
            manifests.check_template(self.cfg, template)
            base = template.image or self.cfg.image or ""
            image = await self.layered.image_for(base, template.layers, template.work_dir, volume_layers)
            template = template.replace(image=image)
        token = self._token_factory()
        manifest = self.pod_manifest(template, pod_name, sandbox_id, token)
        if self.records is not None:
            await self.records.join()
        await self.pods.ensure()
        if template.has_egress:
            await self._ensure_egress_policy(template.egress_allow)
        loop = asyncio.get_running_loop()
        starting = _Starting(loop.create_future())
        self._starting[pod_name] = starting
        budget = max(0.001, min(self.cfg.ready_timeout_s, template.create_timeout_s * 0.95))
        deadline = loop.time() + budget
        maybe_created = False
        uid = ""
        try:
            try:
                async with asyncio.timeout(budget):
                    maybe_created = True
                    try:
                        obj = await self.api.request("POST", self.pods.path, body=manifest)
                    except _ApiError:
                        maybe_created = False  # refused (a 409 is someone else's pod: leave it)
                        raise
                    uid = obj.get("metadata", {}).get("uid", "")
                    if self.cfg.token_mode == "secret":
                        await self.api.request(
                            "POST",
                            f"/api/v1/namespaces/{self.cfg.namespace}/secrets",
                            body=self._secret_manifest(pod_name, uid, token),
                        )
                    self._evaluate("", pod_name)  # the watch may have reported it before our POST's answer
                    ip, port = await starting.future
                    endpoint = f"http://{ip}:{port}"
                    await self._confirm_agent(endpoint, token, deadline)
            except TimeoutError as e:
                if isinstance(e, SandboxError):
                    raise
                raise LaunchError(
                    f"pod {pod_name} was not ready within {budget:.1f}s ({starting.last_status})",
                    step="ready_timeout",
                ) from e
            except _ApiError as e:
                raise _api_failure(e, f"creating pod {pod_name}") from e
        except BaseException:
            self._starting.pop(pod_name, None)
            if maybe_created:
                self._delete_soon(pod_name)
            raise
        self._starting.pop(pod_name, None)
        ref = PodRef(pod_name, self.cfg.namespace, uid, sandbox_id, ip, port)
        self.pods.live[pod_name] = ref
        state, why = pod_readiness(self.pods.release.get(pod_name))
        if state != "ready":  # went away between the agent's answer and now
            self._mark_lost(ref, why)
        return SandboxHandle(id=sandbox_id, endpoint=endpoint, token=token, backend_data=ref)

    async def destroy(self, handle: SandboxHandle) -> None:
        """Delete the pod (its Secret is garbage collected with it). Idempotent."""
        ref = handle.backend_data
        name = ref.name if isinstance(ref, PodRef) else handle.id.lower()
        self.pods.live.pop(name, None)
        if isinstance(ref, PodRef) and not ref.alive() and name not in self.pods.release:
            return  # deleted already (by another replica, or by its node's loss)
        await self.pods.delete(name)

    def forget(self, handle: SandboxHandle) -> None:
        """Stop watching over a sandbox another replica keeps from now on (no request)."""
        ref = handle.backend_data
        name = ref.name if isinstance(ref, PodRef) else handle.id.lower()
        self.pods.live.pop(name, None)

    def alive(self, handle: SandboxHandle) -> bool:
        """False once the watch saw the sandbox's pod go."""
        ref = handle.backend_data
        return ref.alive() if isinstance(ref, PodRef) else True

    async def reap_orphans(self) -> int:
        """Delete this pool's pods whose manager is gone (see the module docstring)."""
        try:
            data = await self.api.request(
                "GET",
                self.pods.path,
                query=[("labelSelector", f"{LABEL_POOL}={self.cfg.pool},{LABEL_MANAGER}")],
            )
        except _ApiError as e:
            raise _api_failure(e, "listing pods to reap") from e
        alive_cache: dict[str, bool] = {}
        victims: list[str] = []
        for pod in data.get("items") or ():
            meta = pod.get("metadata", {})
            labels = meta.get("labels") or {}
            if labels.get(LABEL_OWNER) == self.owner:
                continue
            ann = meta.get("annotations") or {}
            if self.records is not None and ann.get(ANN_REPLICA_LEASE):
                continue  # a sharing replica's: its Lease tells when it is gone (`claims.py`)
            if labels.get(LABEL_MANAGER) == self.identity:
                victims.append(meta["name"])
                continue
            mpod, muid = ann.get(ANN_MANAGER_POD), ann.get(ANN_MANAGER_UID)
            if not mpod or not muid:
                continue  # manager outside the cluster: its agents' leases end its pods
            key = f"{mpod}#{muid}"
            if key not in alive_cache:
                alive_cache[key] = await self._manager_alive(mpod, muid)
            if not alive_cache[key]:
                victims.append(meta["name"])
        results = await asyncio.gather(*(self.pods.delete(n) for n in victims), return_exceptions=True)
        for n, r in zip(victims, results):
            if isinstance(r, BaseException):
                log.warning("reaping orphaned pod %s failed: %s", n, r)
            else:
                log.info("reaped orphaned sandbox pod %s", n)
        return sum(1 for r in results if not isinstance(r, BaseException))

    async def close(self) -> None:
        """Stop the watch, delete pods still live (normally none), close the API client."""
        self.pods.closing = True
        leftovers = list(self.pods.live)
        self.pods.live.clear()
        if leftovers:
            log.warning("kubernetes backend closing with %d live pods; deleting them", len(leftovers))
            await asyncio.gather(*(self.pods.delete(n) for n in leftovers), return_exceptions=True)
        if self._bg:
            await asyncio.gather(*list(self._bg), return_exceptions=True)
        if self.records is not None:
            await self.records.close()
        await self.pods.stop()
        for s in self._starting.values():
            if not s.future.done():
                s.future.set_exception(LaunchError("backend closed", step="closed"))
        await self.api.close()

    # --- manifests (`manifests.py`) ------------------------------------------------------------

    def _owner(self) -> manifests.Owner:
        lease = self.records.replicas.name if self.records is not None else None
        return manifests.Owner(self.identity, self.owner, self.manager_pod, self.manager_uid, lease)

    def pod_manifest(self, t: Template, pod_name: str, sandbox_id: str, token: str) -> dict[str, Any]:
        """The pod of one sandbox of template `t` (pure: no API call; raises `InvalidRequest`)."""
        return manifests.pod_manifest(self.cfg, t, pod_name, sandbox_id, token, self._owner())

    async def create_volume_claim(self, volume: Any) -> None:
        try:
            await self.api.request(
                "POST",
                f"/api/v1/namespaces/{self.cfg.namespace}/persistentvolumeclaims",
                body=claim_manifest(self.cfg, volume),
            )
        except _ApiError as e:
            raise _api_failure(e, f"creating the PersistentVolumeClaim {volume.claim}") from e

    async def delete_volume_claim(self, volume: Any) -> None:
        try:
            await self.api.request(
                "DELETE", f"/api/v1/namespaces/{self.cfg.namespace}/persistentvolumeclaims/{volume.claim}"
            )
        except _ApiError as e:
            if e.status != 404:
                raise _api_failure(e, f"deleting the PersistentVolumeClaim {volume.claim}") from e

    def _secret_manifest(self, pod_name: str, pod_uid: str, token: str) -> dict[str, Any]:
        return manifests.secret_manifest(self.cfg, pod_name, pod_uid, token, self._owner())

    # --- readiness -------------------------------------------------------------------------------

    async def _confirm_agent(self, endpoint: str, token: str, deadline: float) -> None:
        """The agent answers Info: ready means ready. The container may be Running a few ms
        before the agent listens, so a refused connection is retried (bounded by the deadline)."""
        client = _bridge.api().AgentClient(endpoint, token, connect_timeout_s=2.0)
        loop = asyncio.get_running_loop()
        delay = 0.01
        try:
            while True:
                try:
                    await client.info()
                    return
                except SandboxLost:
                    if loop.time() + delay >= deadline:
                        raise
                    await asyncio.sleep(delay)  # the agent is starting: retry with backoff
                    delay = min(0.2, delay * 2)
        finally:
            with contextlib.suppress(Exception):
                client.close()

    def _evaluate(self, kind: str, name: str, pod: dict[str, Any] | None = None) -> None:
        """What a change of pod `name` means for a create waiting on it and a live sandbox."""
        pod = self.pods.release.get(name)
        state, info = pod_readiness(pod)
        starting = self._starting.get(name)
        if starting is not None and not starting.future.done():
            # A pod this backend just created that its watch has not reported yet is pending, not
            # gone: the create's answer may come before the watch event (a watch lags under load).
            unseen = pod is None and kind != "DELETED"
            if state == "ready":
                assert pod is not None
                starting.future.set_result((info, self.pods.port(pod)))
            elif state in ("failed", "gone") and not unseen:
                starting.future.set_exception(
                    LaunchError(f"pod {name} did not start: {info}", detail=info, step="pod")
                )
            else:
                starting.last_status = "created, not reported by the watch yet" if unseen else info
        ref = self.pods.live.get(name)
        if ref is not None and ref.alive() and state != "ready":
            if kind == "DELETED" and self.records is not None and self.records.lookup(ref.sandbox_id):
                ref.lost_reason = info  # a claimed sandbox deleted (by any replica): not a loss
            else:
                self._mark_lost(ref, info)

    def _mark_lost(self, ref: PodRef, why: str) -> None:
        if ref.lost_reason is not None:
            return
        ref.lost_reason = why
        log.warning("sandbox %s lost: pod %s: %s", ref.sandbox_id, ref.name, why)
        if self._lost_listener is not None:
            try:
                self._lost_listener(ref.sandbox_id, why)
            except Exception:
                log.exception("lost listener failed")

    # --- deletion --------------------------------------------------------------------------------

    def _delete_soon(self, name: str) -> None:
        """Delete in a task of its own, so a cancelled create never leaves its pod behind."""

        async def run() -> None:
            try:
                await self.pods.delete(name)
            except Exception as e:  # noqa: BLE001
                log.warning("deleting pod %s failed: %s (the agent's lease ends it)", name, e)

        task = asyncio.ensure_future(run())
        self._bg.add(task)
        task.add_done_callback(self._bg.discard)

    async def _manager_alive(self, manager_pod: str, uid: str) -> bool:
        ns, _, name = manager_pod.partition("/")
        if not ns or not name:
            return True
        try:
            pod = await self.api.request("GET", f"/api/v1/namespaces/{ns}/pods/{name}")
        except _ApiError as e:
            if e.status == 404:
                return False
            log.warning("cannot check manager pod %s: %s; leaving its sandboxes", manager_pod, e)
            return True
        except BackendUnavailable as e:
            log.warning("cannot check manager pod %s: %s; leaving its sandboxes", manager_pod, e)
            return True
        if pod.get("metadata", {}).get("uid") != uid:
            return False
        return pod.get("status", {}).get("phase") not in ("Succeeded", "Failed")
