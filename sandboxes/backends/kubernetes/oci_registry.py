"""The few calls of a container registry's HTTP API (the OCI distribution spec, v2) that stacking
layers on an image needs: read an image's manifest and config, upload blobs, put a manifest.

`stack(image, blobs, tag)` makes image `<registry>/<repository>:<tag>`: the image's own layers
(never copied: they are in the same repository) with `blobs` on top, its config's `diff_ids` and
history extended. Blocking calls (`urllib`); no credentials: the cluster's own registry, reached
as `url` (`http://` for a registry on loopback or a trusted network, else `https://`).
"""

from __future__ import annotations

import hashlib
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...errors import BackendUnavailable, InvalidRequest
from ...state.layer_tar import LayerBlob

__all__ = ["Registry", "RegistryError", "split_image"]

DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
LAYER_TYPE = {
    DOCKER_MANIFEST: "application/vnd.docker.image.rootfs.diff.tar.gzip",
    OCI_MANIFEST: "application/vnd.oci.image.layer.v1.tar+gzip",
}
TIMEOUT_S = 300.0


class RegistryError(BackendUnavailable):
    """The registry refused or failed a call."""


def split_image(image: str) -> tuple[str, str, str]:
    """`host[:port]/repository[:tag|@digest]` -> (host, repository, tag or digest)."""
    if "/" not in image or ("." not in image.split("/", 1)[0] and ":" not in image.split("/", 1)[0]):
        raise InvalidRequest(f"image {image!r} names no registry host")
    host, rest = image.split("/", 1)
    if "@" in rest:
        repo, ref = rest.split("@", 1)
    elif ":" in rest.rsplit("/", 1)[-1]:
        repo, ref = rest.rsplit(":", 1)
    else:
        repo, ref = rest, "latest"
    return host, repo, ref


@dataclass(frozen=True)
class Registry:
    url: str  # scheme://host[:port]

    @property
    def host(self) -> str:
        return urllib.parse.urlsplit(self.url).netloc

    def _call(
        self,
        method: str,
        path: str,
        body: bytes | Any = None,
        headers: dict[str, str] | None = None,
        ok: Sequence[int] = (200,),
    ) -> tuple[int, dict[str, str], bytes]:
        url = path if path.startswith(("http://", "https://")) else self.url + path
        req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=TIMEOUT_S) as r:
                status, hdrs, data = r.status, dict(r.headers), r.read()
        except urllib.error.HTTPError as e:
            status, hdrs, data = e.code, dict(e.headers), e.read()
        except OSError as e:
            raise RegistryError(f"registry {self.host}: {method} {path}: {e}") from e
        if status not in ok:
            raise RegistryError(f"registry {self.host}: {method} {path}: {status} {data[:300]!r}")
        return status, hdrs, data

    def manifest(self, repo: str, ref: str) -> tuple[dict[str, Any], str]:
        """The image manifest (a list's linux/amd64 one) and its media type."""
        accept = f"{OCI_MANIFEST}, {DOCKER_MANIFEST}, {OCI_INDEX}, {DOCKER_LIST}"
        _, h, data = self._call("GET", f"/v2/{repo}/manifests/{ref}", headers={"Accept": accept})
        m = json.loads(data)
        kind = m.get("mediaType") or h.get("Content-Type", "").split(";")[0].strip()
        if kind in (OCI_INDEX, DOCKER_LIST):
            picks = [
                d for d in m.get("manifests", []) if (d.get("platform") or {}).get("architecture") == "amd64"
            ]
            if not picks:
                raise RegistryError(f"registry {self.host}: {repo}:{ref} has no linux/amd64 image")
            return self.manifest(repo, picks[0]["digest"])
        if kind not in LAYER_TYPE:
            raise RegistryError(f"registry {self.host}: {repo}:{ref}: unsupported manifest type {kind!r}")
        return m, kind

    def blob(self, repo: str, digest: str) -> bytes:
        return self._call("GET", f"/v2/{repo}/blobs/{digest}")[2]

    def has_blob(self, repo: str, digest: str) -> bool:
        return self._call("HEAD", f"/v2/{repo}/blobs/{digest}", ok=(200, 404))[0] == 200

    def push_blob(self, repo: str, digest: str, data: bytes | None = None, path: Any = None) -> None:
        """Uploads a blob (bytes, or the file at `path`) unless the repository has it."""
        if self.has_blob(repo, digest):
            return
        _, h, _ = self._call("POST", f"/v2/{repo}/blobs/uploads/", b"", ok=(202,))
        location = urllib.parse.urljoin(self.url, h["Location"])
        sep = "&" if "?" in location else "?"
        target = f"{location}{sep}digest={urllib.parse.quote(digest)}"
        headers = {"Content-Type": "application/octet-stream"}
        if path is not None:
            with open(path, "rb") as f:
                size = f.seek(0, 2)
                f.seek(0)
                self._call("PUT", target, f, {**headers, "Content-Length": str(size)}, ok=(201,))
        else:
            self._call("PUT", target, data or b"", headers, ok=(201,))

    def stack(self, image: str, blobs: Sequence[LayerBlob], tag: str, created_by: str) -> str:
        """Image `image` with `blobs` on top, pushed to the same repository as `<host>/<repo>:<tag>`;
        returns that name."""
        host, repo, ref = split_image(image)
        if host != self.host:
            raise InvalidRequest(f"image {image!r} is not in the cluster's registry {self.host}")
        manifest, kind = self.manifest(repo, ref)
        config = json.loads(self.blob(repo, manifest["config"]["digest"]))
        layers = list(manifest["layers"])
        for b in blobs:
            self.push_blob(repo, b.digest, path=b.path)
            layers.append({"mediaType": LAYER_TYPE[kind], "size": b.size, "digest": b.digest})
            config.setdefault("rootfs", {"type": "layers", "diff_ids": []})["diff_ids"].append(b.diff_id)
            if "history" in config:  # one entry per layer, as the base's has them
                config["history"].append({"created_by": created_by})
        raw = json.dumps(config, separators=(",", ":"), sort_keys=True).encode()
        config_digest = "sha256:" + hashlib.sha256(raw).hexdigest()
        self.push_blob(repo, config_digest, raw)
        out = {
            **manifest,
            "config": {**manifest["config"], "digest": config_digest, "size": len(raw)},
            "layers": layers,
        }
        body = json.dumps(out, separators=(",", ":")).encode()
        self._call("PUT", f"/v2/{repo}/manifests/{tag}", body, {"Content-Type": kind}, ok=(201,))
        return f"{host}/{repo}:{tag}"
