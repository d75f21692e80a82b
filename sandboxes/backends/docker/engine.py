"""The Docker engine as the backend uses it: a client made on first use, every call in a small
thread pool (the event loop never blocks on the API), failures typed as the pool expects."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
from collections.abc import Callable
from typing import Any, TypeVar

from ...errors import BackendUnavailable, LaunchError, SandboxError, SandboxLost

T = TypeVar("T")


class Engine:
    """One `docker.DockerClient` (`docker_host`, else `$DOCKER_HOST`) and the threads its calls
    run in."""

    def __init__(self, docker_host: str | None, api_timeout_s: float, max_workers: int) -> None:
        self.docker_host = docker_host
        self.api_timeout_s = api_timeout_s
        self.max_workers = max_workers
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=max_workers, thread_name_prefix="sandboxes-docker"
        )
        self._client: Any = None  # made on first use (in a thread)
        self._lock = asyncio.Lock()

    async def api(self) -> Any:
        """The low-level `docker.APIClient`; connects on first use. `BackendUnavailable` if not."""
        if self._client is None:
            async with self._lock:
                if self._client is None:
                    self._client = await self.call(
                        connect, self.docker_host, self.api_timeout_s, self.max_workers
                    )
        return self._client.api

    @property
    def connected(self) -> Any:
        """The `docker.APIClient` of an engine `api()` connected to (for code in its threads)."""
        return self._client.api

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(api, *args)` in a thread, once connected."""
        return await self.call(fn, await self.api(), *args)

    def submit(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """`fn(*args)` started in a thread of the engine's pool."""
        return asyncio.get_running_loop().run_in_executor(self._executor, functools.partial(fn, *args))

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        try:
            return await self.submit(fn, *args)
        except RuntimeError as e:  # executor shut down
            raise BackendUnavailable(f"docker backend is closed: {e}") from e

    def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                client.close()
        self._executor.shutdown(wait=False, cancel_futures=True)


def connect(docker_host: str | None, timeout_s: float, max_pool_size: int) -> Any:
    """A `docker.DockerClient` whose engine answered a ping (blocking)."""
    try:
        import docker
    except ImportError as e:
        raise BackendUnavailable(
            "the docker backend needs the `docker` package: pip install 'sandboxes[docker]'",
            detail=str(e),
        ) from e
    try:
        if docker_host:
            client = docker.DockerClient(
                base_url=docker_host, timeout=int(timeout_s), max_pool_size=max_pool_size
            )
        else:
            client = docker.from_env(timeout=int(timeout_s), max_pool_size=max_pool_size)
        client.api.ping()
    except Exception as e:
        raise BackendUnavailable(f"the Docker engine does not answer: {e}", detail=str(e)) from e
    return client


def image_id(api: Any, image: str) -> str:
    """The id of `image` in the engine (blocking); `LaunchError` (step "image") if it is not there."""
    import docker.errors as de

    try:
        return str(api.inspect_image(image)["Id"])
    except de.ImageNotFound as e:
        raise missing_image(image, e) from e
    except de.DockerException as e:
        raise translate(e, "inspect", image) from e


def create_start(api: Any, spec: dict[str, Any]) -> str:
    """create + start (2 API calls, blocking); the container is removed again if start fails."""
    import docker.errors as de

    host_config = api.create_host_config(**spec["host_config"])
    image = spec["image"]
    try:
        created = api.create_container(
            image=image,
            name=spec["name"],
            entrypoint=spec["entrypoint"],
            user=spec["user"],
            working_dir=spec["working_dir"],
            hostname=spec["hostname"],
            labels=spec["labels"],
            host_config=host_config,
        )
    except de.ImageNotFound as e:
        raise missing_image(image, e) from e
    except Exception as e:
        raise translate(e, "create", image) from e
    cid = created["Id"]
    try:
        api.start(cid)
    except Exception as e:
        with contextlib.suppress(Exception):
            api.remove_container(cid, force=True)
        raise translate(e, "start", image) from e
    return str(cid)


def remove_container(api: Any, ref: str) -> None:
    """Force-remove (SIGKILL + remove, blocking); a container already gone or being removed is fine."""
    import docker.errors as de

    try:
        api.remove_container(ref, force=True)
    except de.NotFound:
        pass
    except de.APIError as e:
        if e.status_code == 409 and "in progress" in str(e.explanation):  # auto_remove racing
            return
        raise translate(e, "remove", "") from e
    except Exception as e:
        raise translate(e, "remove", "") from e


def pause_container(api: Any, ref: str, paused: bool) -> None:
    """Pause (freeze every process) or unpause a container (blocking)."""
    import docker.errors as de

    step = "pause" if paused else "unpause"
    try:
        if paused:
            api.pause(ref)
        else:
            api.unpause(ref)
    except de.NotFound as e:
        raise SandboxLost(f"container {ref} is gone") from e
    except de.APIError as e:
        raise BackendUnavailable(f"docker {step} of {ref} failed: {e.explanation or e}", detail=str(e)) from e
    except Exception as e:
        raise translate(e, step, "") from e


def missing_image(image: str, e: BaseException) -> LaunchError:
    return LaunchError(
        f"docker image {image!r} is not in the engine (nothing is pulled: build it with "
        f"`make images`, or `docker load` it)",
        detail=str(e),
        step="image",
    )


def translate(e: BaseException, step: str, image: str) -> SandboxError:
    """A Docker SDK / transport failure as a `sandboxes.errors` exception."""
    if isinstance(e, SandboxError):
        return e
    try:
        import docker.errors as de
        import requests
    except ImportError:  # pragma: no cover - the SDK is there if we got this far
        return BackendUnavailable(str(e))
    if isinstance(e, de.APIError):
        why = str(e.explanation or e)
        if step == "start" and ("/bin/sh" in why and ("no such file" in why or "not found" in why)):
            return LaunchError(
                f"image {image!r} has no /bin/sh, which the docker backend's entrypoint needs: {why}",
                detail=why,
                step="entrypoint",
            )
        if e.status_code is not None and e.status_code >= 500 and step in ("list", "remove"):
            return BackendUnavailable(f"docker {step} failed: {why}", detail=why)
        where = f" (image {image!r})" if image else ""
        return LaunchError(f"docker {step} failed{where}: {why}", detail=why, step=step)
    if isinstance(e, (requests.exceptions.ConnectionError, requests.exceptions.Timeout, de.DockerException)):
        return BackendUnavailable(f"the Docker engine does not answer ({step}): {e}", detail=str(e))
    return LaunchError(f"docker {step} failed: {e!r}", detail=str(e), step=step)
