"""The gate's own cost on steps like users': a flax CNN and a small transformer, warm cache.

    JAX_PLATFORMS=cpu .venv/bin/python -m benchmarks realistic_steps [--rounds 3]

Builds a throwaway repository with two regions written the way a project writes them
(model and optimiser made once at import; setup makes fresh parameters, optimiser state and
a batch before every run, with a jitted initialiser):

- ``cnn``: a flax Linen CNN (two 3x3 convolutions of 16 and 32 channels, average pooling, a
  dense layer of 10), adam, a batch of 32 28x28 images;
- ``transformer``: a flax Linen encoder (2 blocks, width 64, 4 heads, MLP 128), adamw,
  next-token cross-entropy on a batch of 8 sequences of 64 tokens from a vocabulary of 256.

Both compile for longer than they run (the first call dominates), as most users' steps do
in CI. It times, alternating (A B C A B C ...) so that load drifts hit all alike:

- the floor: one script doing the gate's phases by hand (first call, 2 warm-ups, 3 runs
  under ``jax.transfer_guard("disallow")``, 20 timed runs, a finite check);
- ``transfer-gate run`` of the policy;
- ``transfer-gate run --base HEAD`` (the repository committed: base and head the same tree).

Every command runs with ``JAX_COMPILATION_CACHE_DIR`` pointing at one folder, warmed by an
untimed run of each first: what a CI job with its cache restored sees; all with the cache
thresholds the gate gives its workers (every program kept, however fast it compiled).
Prints the medians over ``--rounds`` (wall and CPU seconds) and the gate/floor ratios, and
the load average.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from benchmarks.processes import commit_all, gate_env, load_average, medians, timed
from benchmarks.regions import MODELS, write_floor

# `--base HEAD` compares the tree with itself: every region compared, as before issue 55.
POLICY = """version: 1
suite: models
defaults: {compare: always}
regions:
  - {name: cnn, step: "models:cnn_step", setup: "models:cnn_inputs", checks: {finite: true}}
  - {name: transformer, step: "models:lm_step", setup: "models:lm_inputs", checks: {finite: true}}
"""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    load_before = load_average()
    with tempfile.TemporaryDirectory() as scratch:
        repo = Path(scratch) / "repo"
        (repo / "policies").mkdir(parents=True)
        (repo / "models.py").write_text(MODELS)
        write_floor(repo, "models", [("cnn_step", "cnn_inputs"), ("lm_step", "lm_inputs")])
        (repo / "policies" / "models.yaml").write_text(POLICY)
        commit_all(repo)
        env = gate_env(cache=Path(scratch) / "jax-cache")
        # The thresholds the gate gives its workers (`gate.isolation.compile_cache`), for the
        # floor too: with JAX's defaults (1 s) the floor's programs, each compiled in less,
        # were never cached, and the floor compiled everything again each round.
        env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
        env["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "0"
        gate = [sys.executable, "-m", "gate", "run", "--junit", str(Path(scratch) / "r.xml")]
        cases = {
            "floor": [sys.executable, "floor.py"],
            "gate": gate,
            "gate --base HEAD": [*gate, "--base", "HEAD"],
        }
        for command in cases.values():  # the cache warmed: what a job with it restored sees
            timed(command, repo, env, ok=(0, 1))
        seconds: dict[str, list[tuple[float, float]]] = {case: [] for case in cases}
        for i in range(args.rounds):
            for case, command in cases.items():
                seconds[case].append(timed(command, repo, env, ok=(0, 1)))
                wall, cpu = seconds[case][-1]
                print(f"round {i + 1}: {case} {wall:.1f} s ({cpu:.1f} s CPU)", file=sys.stderr)
    floor = medians(seconds["floor"])
    print("| run | wall s | CPU s | wall / floor | CPU / floor |")
    print("|---|---|---|---|---|")
    for case in cases:
        wall, cpu = medians(seconds[case])
        ratios = f"{wall / floor[0]:.2f}x | {cpu / floor[1]:.2f}x"
        print(f"| {case} | {wall:.1f} | {cpu:.1f} | {ratios} |")
    print(f"\nload average: {load_before} before, {load_average()} after")
