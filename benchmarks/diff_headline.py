"""The cost verdict against the base names the line that grew, never "(no source line)" (issue 56).

A committed region, a jitted step of a matmul, a ``tanh`` and a sum; in the working tree its
matmul line does 4x the work and a sort is added two lines below (issue 56's change). On a TPU
the compiler adds copies (``copy-start``, ``copy-done``) and layout changes for the grown line's
operands, which have no source line of their own: the gate charges them to the line they serve
(`gate.witness.line_work`). ``run --base HEAD --json`` must then head its cost verdict with the
grown line, labelled a changed line, and list no "(no source line)" entry first.

    python -m benchmarks diff_headline [--size 4096]

Prints the verdict's headline and its lines, and exits 1 when the check fails.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from benchmarks.processes import commit_all, gate_regions

STEP = """import jax
import jax.numpy as jnp


@jax.jit
def step(x, w, y):
    h = x @ w
    s = jnp.tanh(h).sum()
    return s + y.sum()


def batch():
    k = jax.random.PRNGKey(0)
    x = jax.random.normal(k, ({n}, {n}), jnp.float32)
    y = jax.random.normal(k, (128, 256), jnp.float32)
    return (x, x, y)
"""
POLICY = """version: 1
defaults: {warmup: 1, guarded_runs: 1, repeats: 2}
regions:
  - {name: step, step: "steps:step", setup: "steps:batch", timing: off}
"""
GROWN = "steps.py:7 (changed line)"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=4096, help="the matmul's side (default 4096)")
    options = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        repo = Path(scratch)
        (repo / "policies").mkdir()
        (repo / "policies" / "p.yaml").write_text(POLICY)
        source = STEP.format(n=options.size)
        (repo / "steps.py").write_text(source)
        commit_all(repo)
        head = source.replace("h = x @ w", "h = (x @ w) @ w @ w @ w").replace(
            "return s + y.sum()", "return s + jnp.sort(y, axis=0).sum()"
        )
        (repo / "steps.py").write_text(head)
        region = gate_regions(repo, "--base", "HEAD")[0]
    cost = (region.get("base") or {}).get("cost") or {}
    headline = cost.get("headline") or ""
    changes = (cost.get("lines") or {}).get("changes") or []
    machine = region.get("machine") or {}
    print(f"platform: {machine.get('accelerator')}, jax {machine.get('jax')}")
    print(f"headline: {headline}")
    for change in changes:
        print(f"  {change['code'] or '-'} | {change['text']}")
    located = headline.split(": ", 1)[-1]  # past the verdict's own words ("work beyond ...")
    checks = {
        f"the headline names {GROWN}": located.startswith(GROWN),
        '"(no source line)" is not in the headline': "(no source line)" not in headline,
        "the first line listed is the grown one": bool(changes)
        and changes[0]["text"].startswith(GROWN),
    }
    for what, ok in checks.items():
        print(f"{'ok' if ok else 'MISSED'}: {what}")
    if not all(checks.values()):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
