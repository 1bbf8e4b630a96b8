"""``python -m gate``: the same as the ``transfer-gate`` command, but for one case.

In a repository with a ``gate`` package of its own, ``python -m gate`` runs that package (Python
puts the working directory first on sys.path); ``transfer-gate`` always runs this one.
"""

from gate.cli.main import main

raise SystemExit(main())
