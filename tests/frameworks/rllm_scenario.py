"""rLLM's Daytona sandbox backend and its snapshot warm start (`rllm/sandbox/backends/daytona.py`,
`rllm/sandbox/snapshot.py`, unmodified, from the archive in ../shared/frameworks) against a real
`sandboxes serve`, run by tests/test_frameworks.py in the rllm client venv with rLLM's source on
PYTHONPATH:

    python rllm_scenario.py TASKDIR REGISTRY    (DAYTONA_API_URL and DAYTONA_API_KEY set)

A task whose environment is a Dockerfile (a base image and RUN steps). Its snapshot is made as
docs/frameworks.md says (rLLM's own `build_daytona_snapshot` fails in the client on every
platform: recorded here), recorded in rLLM's snapshot registry, and booted by `get_sandbox` (the
warm start: the RUN steps baked, not replayed); the snapshot is then deleted by rLLM's own call,
and the next `get_sandbox` falls back to a cold start (base image, RUN replayed). Files go in by
rLLM's upload calls. Prints one JSON object.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from daytona import CreateSnapshotParams, Daytona, Image
from rllm.eval._resolution import _dockerfile_run_commands, _resolve_image
from rllm.sandbox.backends.daytona import _daytona_ref_absent, build_daytona_snapshot, delete_daytona_snapshot
from rllm.sandbox.snapshot import SnapshotRegistry, env_key_for, get_sandbox
from rllm.types import Task


def main(task_dir: str, registry_path: str) -> None:
    out: dict = {}
    task = Task(id="task-1", instruction="add", metadata={}, dataset_dir=Path(task_dir))
    key = env_key_for(task, "daytona")
    out["key"] = key
    try:
        build_daytona_snapshot(task, key)
        out["own_build"] = "built"
    except TypeError as e:
        out["own_build"] = f"TypeError: {e}"
    image = Image.base(_resolve_image(task, "daytona")).run_commands(*_dockerfile_run_commands(task))
    Daytona().snapshot.create(CreateSnapshotParams(name=key, image=image))
    registry = SnapshotRegistry(path=registry_path)
    base = _resolve_image(task, "daytona")
    registry.record_group(
        "demo", "daytona", {"kind": "all"}, [{"id": task.id, "env_key": key, "ref": key, "base_image": base}]
    )

    warm = get_sandbox(task, "daytona", registry)
    try:
        out["warm"] = {
            "baked": warm.exec("cat /opt/marker.txt"),
            "replayed": warm.exec("cat /opt/replayed.txt"),
            "snapshot": warm._sandbox.snapshot,
            "alive": warm.is_alive(),
        }
        src = Path(task_dir) / "upload"
        (src / "pkg").mkdir(parents=True)
        (src / "pkg" / "a.py").write_text("print('a')\n")
        (src / "one.txt").write_text("one\n")
        warm.upload_file(str(src / "one.txt"), "/work/in/one.txt")
        warm.upload_dir(str(src / "pkg"), "/work/in/pkg")
        out["warm"]["uploaded"] = warm.exec("cat /work/in/one.txt && python3 /work/in/pkg/a.py")
        try:
            warm.exec("exit 3")
            out["warm"]["failed"] = None
        except RuntimeError as e:
            out["warm"]["failed"] = str(e).splitlines()[0]
    finally:
        warm.close()
    out["closed_alive"] = warm.is_alive()

    out["deleted"] = delete_daytona_snapshot(key)
    out["absent"] = _daytona_ref_absent(key)
    cold = get_sandbox(task, "daytona", registry)  # the registry still names the gone snapshot
    try:
        out["cold"] = {
            "baked": cold.exec("cat /opt/marker.txt"),
            "replayed": cold.exec("cat /opt/replayed.txt"),
            "snapshot": cold._sandbox.snapshot,
        }
    finally:
        cold.close()
    out["discarded"] = registry.lookup_env(key, "daytona") is None
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
    os._exit(0)
