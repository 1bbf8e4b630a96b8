"""``python -m gate.ci STEP``: one step of the reusable workflow (.github/workflows/gate.yml).

Each step reads its ``env:`` and writes its outputs and summary where GitHub says; the exit
status is the step's. `inputs`, `paths`, `cache-scope`, `tpu-vm` and `verdict` need nothing but
the standard library: their jobs run them from the gate's checkout, with no install. `tpu-vm`
runs with a TPU VM's python3 before its version is known: what this module imports stays
readable by Python 3.8, so that an older one gets the step's message (gate/ci/tpu_vm.py).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence

from gate.ci.cache_key import cache_key_step
from gate.ci.cache_scope import cache_scope_step
from gate.ci.history import history_step
from gate.ci.inputs import inputs_step
from gate.ci.paths import paths_step
from gate.ci.tpu_vm import tpu_vm_step
from gate.ci.verdict import verdict_step
from gate.printable import say

STEPS: dict[str, Callable[[Mapping[str, str]], int]] = {
    "inputs": inputs_step,
    "paths": paths_step,
    "cache-scope": cache_scope_step,
    "cache-key": cache_key_step,
    "tpu-vm": tpu_vm_step,
    "history": history_step,
    "verdict": verdict_step,
}


def main(argv: Sequence[str], environ: Mapping[str, str] = os.environ) -> int:
    """Run the step ``argv[0]``; 2 for a name that is none."""
    if len(argv) != 1 or argv[0] not in STEPS:
        say(f"usage: python -m gate.ci {{{','.join(STEPS)}}}", sys.stderr)
        return 2
    return STEPS[argv[0]](environ)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
