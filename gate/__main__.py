"""``python -m gate``: the same as the ``transfer-gate`` command."""

from gate.cli import main

raise SystemExit(main())
