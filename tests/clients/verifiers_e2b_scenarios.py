"""verifiers 0.4's E2B runtime, unmodified, against a real `sandboxes serve`; run inside the client
virtualenv (tests/clients/verifiers-e2b.txt) by tests/test_e2b_templates.py:

    python verifiers_e2b_scenarios.py SCENARIO IMAGE    (E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY set)

Prints one JSON object of what it observed.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

from verifiers.v1.runtimes.e2b import E2BConfig, E2BRuntime


async def session(image: str) -> dict[str, Any]:
    """Two rollouts' runtimes: the first builds the template (`AsyncTemplate`), the second finds
    it; each runs commands, a durable program and a live process, writes and reads files."""
    out: dict[str, Any] = {}
    for i in range(2):
        rt = E2BRuntime(E2BConfig(image=image), name=f"rollout-{i}")
        await rt.start()
        try:
            out[f"template_{i}"] = rt.info.template
            r = await rt.run(["python3", "-c", "import os; print(os.getcwd(), os.getuid())"], {"X": "1"})
            out[f"run_{i}"] = [r.exit_code, r.stdout, r.stderr]
            r = await rt.run(["sh", "-c", "echo $X; exit 4"], {"X": "from-env"})
            out[f"exit_{i}"] = [r.exit_code, r.stdout]
            await rt.write("notes/a.txt", b"written by rollout %d\n" % i)
            out[f"read_{i}"] = (await rt.read("notes/a.txt")).decode()
            p = await rt.run_program(["sh", "-c", "echo program-out; echo program-err >&2; exit 2"], {})
            out[f"program_{i}"] = [p.exit_code, p.stdout, p.stderr]
            proc = await rt.open_process(
                ["python3", "-c", "import sys; print(sys.stdin.readline().upper())"], {}
            )
            await proc.write(b"hello process\n")
            chunks = [c async for c in proc.stdout]
            out[f"process_{i}"] = [await proc.wait(), b"".join(chunks).decode()]
        finally:
            await rt.teardown()
    return out


SCENARIOS = {"session": session}


def main() -> None:
    out = asyncio.run(SCENARIOS[sys.argv[1]](sys.argv[2]))
    print(json.dumps(out, default=str), flush=True)
    os._exit(0)  # the SDK's transport may abort at interpreter teardown (see e2b_scenarios.py)


if __name__ == "__main__":
    main()
