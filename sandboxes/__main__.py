"""`python -m sandboxes ...` is the `sandboxes` command."""

from sandboxes.cli import main

raise SystemExit(main())
