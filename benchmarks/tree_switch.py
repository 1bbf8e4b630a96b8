"""What two trees in one worker cost (``run --base``): a switch, and the other-tree watch.

    JAX_PLATFORMS=cpu .venv/bin/python benchmarks/tree_switch.py [--before e18109e]

``run --base`` enters each tree twice a round (`gate.policy.trees.Trees.entered`). This
times a switch with jax, flax and optax imported and ``--modules`` modules of each tree's
own imported, side by side in one process, alternating blocks (A B A B ...) so that load
drifts hit both alike:

- ``before``: `gate/policy/trees.py` as it was at ``--before`` (loaded from git);
- ``after``: this checkout's, which also sets aside and puts back an installed module of a
  name the base ships (``mathlib``, imported by both trees: the case it exists for).

Then the first call of a flax transformer's train step (tracing and compiling, after
``jax.clear_caches()``), alternating: under the transfer map alone, under the map with the
other-tree watch (`gate.region.other_tree_code`) looking at what it does not trace (a
region's first call in ``run --base``), and under the watch's own profile function (the
fallback where the guard's log cannot be read). Prints the medians.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from realistic_steps import MODELS

ROOT = Path(__file__).resolve().parent.parent


def _trees_before(ref: str, folder: Path) -> ModuleType:
    """`gate/policy/trees.py` at ``ref``, imported under a name of its own."""
    text = subprocess.run(
        ["git", "show", f"{ref}:gate/policy/trees.py"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    path = folder / "trees_before.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("trees_before", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["trees_before"] = module  # its dataclasses look themselves up there
    spec.loader.exec_module(module)
    return module


def _tree(root: Path, prefix: str, modules: int, mathlib: bool) -> None:
    root.mkdir(parents=True)
    for i in range(modules):
        (root / f"{prefix}_mod_{i}.py").write_text(f"VALUE = {i}\n")
    if mathlib:
        (root / "mathlib.py").write_text("WHO = 'base'\n")


def _switcher(trees: Any, head: Path, base: Path, prefix: str, modules: int) -> Callable[[], None]:
    """Both trees entered and their modules imported; returns one round's two switches."""
    for root in (head, base):
        with trees.entered(root):
            for i in range(modules):
                __import__(f"{prefix}_mod_{i}")
            __import__("mathlib")

    def round_trip() -> None:
        with trees.entered(base):
            pass
        with trees.entered(head):
            pass

    return round_trip


def _switch_us(round_trip: Callable[[], None], switches: int) -> float:
    start = time.perf_counter()
    for _ in range(switches // 2):
        round_trip()
    return (time.perf_counter() - start) / switches * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="e18109e", help="the commit to compare with")
    parser.add_argument("--modules", type=int, default=50, help="modules of each tree's own")
    parser.add_argument("--blocks", type=int, default=20)
    parser.add_argument("--switches", type=int, default=2000, help="switches per block")
    parser.add_argument("--first-calls", type=int, default=6, help="first calls per side")
    args = parser.parse_args()

    import jax

    sys.path.insert(0, str(ROOT))
    from gate.policy.trees import Trees
    from gate.region.other_tree_code import other_tree_watch, profiled
    from gate.user_code import UserCode
    from gate.witness.transfer_map import mapped

    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary)
        installed = folder / "installed"
        installed.mkdir()
        (installed / "mathlib.py").write_text("WHO = 'installed'\n")
        (folder / "models.py").write_text(MODELS)
        sys.path[:0] = [str(folder), str(installed)]
        import models  # flax, optax: a process with what a user's worker imports

        before = _trees_before(args.before, folder)
        sides: dict[str, Callable[[], None]] = {}
        for name, trees in (("before", before.Trees()), ("after", Trees())):
            head, base = folder / name / "head", folder / name / "base"
            _tree(head, name, args.modules, mathlib=False)
            _tree(base, name, args.modules, mathlib=True)
            sides[name] = _switcher(trees, head, base, name, args.modules)
        times: dict[str, list[float]] = {name: [] for name in sides}
        for _ in range(args.blocks):
            for name, round_trip in sides.items():
                times[name].append(_switch_us(round_trip, args.switches))
        print(f"modules in the process: {len(sys.modules)}")
        for name, samples in times.items():
            print(f"switch, {name}: median {statistics.median(samples):.1f} µs")

        step, inputs = models.lm_step, models.lm_inputs()
        base_code = UserCode(folder / "after" / "base", other_roots=(folder / "after" / "head",))

        def first_call(name: str) -> float:
            """One first call (traced and compiled) under the transfer map, as a region's is."""
            watch = other_tree_watch(base_code)
            assert watch is not None
            jax.clear_caches()
            start = time.perf_counter()
            if name == "map":
                with mapped(base_code):
                    jax.block_until_ready(step(*inputs))
            elif name == "map + watch":
                with mapped(base_code, untraced=watch.look):
                    jax.block_until_ready(step(*inputs))
            else:  # no map (the guard's log unseen): the watch's own profile function
                with profiled(watch):
                    jax.block_until_ready(step(*inputs))
            return time.perf_counter() - start

        first: dict[str, list[float]] = {"map": [], "map + watch": [], "profile only": []}
        for _ in range(args.first_calls):
            for name, samples in first.items():
                samples.append(first_call(name))
        for name, samples in first.items():
            print(f"transformer first call, {name}: median {statistics.median(samples):.3f} s")


if __name__ == "__main__":
    main()
