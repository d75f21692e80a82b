"""The E2B SDK of tests/clients/e2b-2.50.txt (the v1 create and connect routes) against a real
`sandboxes serve`, run by tests/test_e2b_api.py:

    python e2b_v1_scenarios.py    (E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY set)

Prints one JSON object of what it observed.
"""

from __future__ import annotations

import json
import os

from e2b_code_interpreter import Sandbox


def main() -> None:
    out: dict = {}
    sb = Sandbox.create(timeout=120, metadata={"run": "v1"})
    out["code"] = sb.run_code("\n    x = 20\n    x + 22\n").text
    out["command"] = sb.commands.run("echo v1").stdout
    again = Sandbox.connect(sb.sandbox_id)
    out["connected"] = again.commands.run("echo again").stdout
    out["listed"] = [s.sandbox_id == sb.sandbox_id for s in Sandbox.list().next_items()]
    out["killed"] = sb.kill()
    out["gone"] = Sandbox.list().next_items() == []
    print(json.dumps(out), flush=True)
    os._exit(0)


if __name__ == "__main__":
    main()
