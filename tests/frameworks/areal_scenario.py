"""AReaL's Daytona runner (`areal/infra/sandbox`, unmodified, from its wheel) against a real
`sandboxes serve`, run by tests/test_frameworks.py in the areal client venv:

    python areal_scenario.py    (DAYTONA_API_URL and DAYTONA_API_KEY set)

`DaytonaRunner` as AReaL's rollouts use it: one sandbox (the platform's default snapshot), code
runs that keep no state between them unless they write files, a failing program, a program past
its timeout, then `close` (which deletes the sandbox). AReaL's package `__init__`s (its trainers
and launchers) are not run: `bare.py`. Prints one JSON object.
"""

from __future__ import annotations

import json
import os

from bare import installed, load

ROOT = installed("areal")  # found, not imported: its package __init__ loads its training stack


def main() -> None:
    sandbox = load(ROOT, "areal.infra.sandbox", "areal", "areal.infra")
    out: dict = {}
    with sandbox.DaytonaRunner(default_timeout=20) as runner:
        runner.start()
        first = runner.run("import math\nprint(math.factorial(5))\nopen('/tmp/state', 'w').write('kept')")
        out["first"] = [first.stdout, first.exit_code, first.error]
        again = runner.run("print(open('/tmp/state').read())")
        out["again"] = [again.stdout, again.exit_code]
        failed = runner.run("raise ValueError('bad input')")
        out["failed"] = [failed.exit_code, failed.error]
        slow = runner.run("import time\ntime.sleep(30)", timeout=2)
        out["slow"] = [slow.exit_code]
        after = runner.run("print('still serving')")
        out["after"] = [after.stdout, after.exit_code]
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
    os._exit(0)
