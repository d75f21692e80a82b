"""API-key authentication of the server: `authorization: Bearer <key>` metadata.

Keys come from a file (one per line: `name:key` or just `key`; blank lines and `#` comments are
skipped) and/or the environment variable `SANDBOXES_API_KEYS` (comma-separated, same forms). The key's
name is the owner of every sandbox it creates: one key never sees another key's sandboxes.

With no key configured the server refuses to start unless it is explicitly `insecure`; then every
caller is the owner "anonymous".
"""

from __future__ import annotations

import hashlib
import hmac
import os
import pathlib
from collections.abc import Iterable, Mapping, Sequence

from sandboxes.errors import InvalidRequest
from sandboxes.status import Unauthenticated

__all__ = ["ANONYMOUS", "ENV_VAR", "ApiKeys", "load_keys", "parse_keys"]

ENV_VAR = "SANDBOXES_API_KEYS"
ANONYMOUS = "anonymous"


def _parse_entry(entry: str) -> tuple[str, str] | None:
    entry = entry.strip()
    if not entry or entry.startswith("#"):
        return None
    name, sep, key = entry.partition(":")
    if sep and name.strip() and key.strip():
        return name.strip(), key.strip()
    # A bare key: its owner name is derived from a hash, never the key itself (it ends up in logs).
    key = entry
    return "key-" + hashlib.sha256(key.encode()).hexdigest()[:12], key


def parse_keys(entries: Iterable[str]) -> dict[str, str]:
    """`name:key` / `key` entries -> {key: name}."""
    keys: dict[str, str] = {}
    for entry in entries:
        parsed = _parse_entry(entry)
        if parsed is not None:
            name, key = parsed
            keys[key] = name
    return keys


def load_keys(path: str | os.PathLike | None = None, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Keys of `path` (if given) and of `$SANDBOXES_API_KEYS`."""
    env = os.environ if env is None else env
    keys: dict[str, str] = {}
    if path:
        try:
            text = pathlib.Path(path).read_text()
        except OSError as e:
            raise InvalidRequest(f"cannot read the API keys file {path}: {e.strerror}") from e
        keys.update(parse_keys(text.splitlines()))
    if env.get(ENV_VAR):
        keys.update(parse_keys(env[ENV_VAR].split(",")))
    return keys


class ApiKeys:
    """Checks the bearer key of each call in constant time; returns the caller's owner name."""

    def __init__(self, keys: dict[str, str], *, insecure: bool = False) -> None:
        if not keys and not insecure:
            raise InvalidRequest(
                "no API keys configured: give --api-keys-file or $SANDBOXES_API_KEYS, "
                "or run with --insecure to disable authentication"
            )
        # Compare digests so every comparison has the same length; compare against every key so
        # the time taken does not tell which key came close.
        self._digests = [(hashlib.sha256(k.encode()).digest(), name) for k, name in keys.items()]
        self.enabled = bool(keys)

    @classmethod
    def from_sources(
        cls, path: str | None = None, *, insecure: bool = False, env: dict | None = None
    ) -> ApiKeys:
        return cls(load_keys(path, env), insecure=insecure)

    def authenticate(self, metadata: Sequence | None) -> str:
        """The owner name of the call's key (gRPC metadata); raises Unauthenticated."""
        header = None
        for item in metadata or ():
            if item[0] == "authorization":
                header = item[1]
                break
        return self.authenticate_header(header)

    def authenticate_header(self, header: str | bytes | None) -> str:
        """The owner name of an `authorization` value (`Bearer <key>`; None or empty: absent)."""
        if not self.enabled:
            return ANONYMOUS
        if not header:
            raise Unauthenticated("missing API key: send `authorization: Bearer <key>` metadata")
        if isinstance(header, bytes):
            header = header.decode("latin-1")
        scheme, _, key = header.strip().partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            raise Unauthenticated("malformed authorization metadata: expected `Bearer <key>`")
        digest = hashlib.sha256(key.strip().encode("utf-8", "replace")).digest()
        owner = None
        for known, name in self._digests:
            if hmac.compare_digest(known, digest):
                owner = name
        if owner is None:
            raise Unauthenticated("invalid API key")
        return owner
