"""Write docs/cookbook.md from the recipes in this folder and what the gate really says about them.

    .venv/bin/python docs/cookbook/generate.py            # rewrite docs/cookbook.md
    .venv/bin/python docs/cookbook/generate.py --check    # fail when the page is stale

One ``transfer-gate run`` of both recipe policies (two workers: the two-device policy has an
``env:`` of its own), in a process group of its own, killed on timeout. The page's code is cut
from the recipe modules by name, the gate's output from its stdout, with the measured figures
(medians, FLOPs, boundary times) replaced by ``…``. Before writing anything, the run is checked
against the recipes: every leaky region failed, exactly at the lines marked ``# LEAK`` in its
module, and every fixed region passed; a page that showed a passing leak would be worse than none.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import difflib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
PAGE = ROOT / "docs" / "cookbook.md"
POLICIES = (HERE / "cookbook.yaml", HERE / "two_devices.yaml")
REGENERATE = ".venv/bin/python docs/cookbook/generate.py"
TIMEOUT_S = 240.0
# A leaky line ends in a comment "# LEAK: why", or "# RECOMPILE: why" where it compiles again
# as the loop's step moves on (what the docstrings say about it is no marker).
MARKER = re.compile(r"\S {2}# (LEAK|RECOMPILE): ")


@dataclass(frozen=True)
class Recipe:
    """One recipe: a module ``cookbook.<slug>``, regions ``<slug>-leaky`` and ``<slug>-fixed``."""

    slug: str
    title: str
    written: str  # what people write
    why: str  # why it moves data
    fix: str  # the fix, in words
    leaky: tuple[str, ...]  # the module's top-level names the leaky code is made of
    fixed: tuple[str, ...]
    policy: Path = POLICIES[0]
    whole_policy: bool = False  # show the policy file, not only the two regions
    note: str = ""
    why_heading: str = "Why it moves data."  # what ``why`` answers

    @property
    def path(self) -> Path:
        return HERE / f"{self.slug}.py"

    def classname(self, side: str) -> str:
        suite = "cookbook-two-devices" if self.policy == POLICIES[1] else "cookbook"
        return f"{suite}.{self.slug}-{side}"


RECIPES = (
    Recipe(
        slug="numpy_batch",
        title="A NumPy batch handed to a jitted step",
        written="The data loader yields NumPy arrays and the step passes them straight to the "
        "jitted update.",
        why="A jitted function runs on the device; every NumPy argument is copied there on "
        "every call, before the step can start, and the copy is on the step's critical path.",
        fix="Put the batch on the device where it is made: `jax.device_put` in setup (in a "
        "real loop, in the data loader, ideally a step ahead). The step itself does not change.",
        leaky=("leaky_setup", "step"),
        fixed=("fixed_setup",),
    ),
    Recipe(
        slug="python_scalar",
        title="A Python learning rate and step counter passed on every call",
        written="The loop keeps `step` as a Python `int` and passes it, with the learning rate, "
        "to the jitted update to compute a schedule.",
        why="A Python number passed to a jitted function is a traced argument: JAX makes a "
        "0-d array of it and copies it to the device on every call (one copy per number, "
        "`float32[]` and `int32[]` here). A `static_argnums` number would be worse: a new value "
        "compiles again.",
        fix="Close over the constant (it becomes part of the compiled program) and keep the "
        "counter on the device: put it there once in setup and let the jitted update return "
        "`step + 1`.",
        leaky=("scheduled_update", "leaky_setup", "leaky_step"),
        fixed=("counted_update", "fixed_setup", "fixed_step"),
    ),
    Recipe(
        slug="host_logging",
        title="`print(loss)` and a `bool(...)` check inside the step",
        written="The step prints the loss and checks that the weights are still finite.",
        why="Printing, formatting, `float()`, `int()`, `bool()` and `if x:` need the value on "
        "the host: each waits for the device to finish and copies the array back. On a GPU "
        "JAX's guard sees it; on the CPU backend JAX checks nothing (the buffer is shared "
        "with the host), and the gate's own device-to-host detector reports it, as here.",
        fix="Keep the step on the device and fetch what the host needs in one explicit "
        "`jax.device_get`, inside a function the policy declares under `boundaries:`. The fixed "
        "region runs under `guard: disallow_explicit`, so even an explicit transfer fails "
        "anywhere but in the boundary; the gate lists the boundary's fetches as allowed.",
        leaky=("leaky_step",),
        fixed=("fetch_metrics", "fixed_step"),
    ),
    Recipe(
        slug="eager_indexing",
        title="`.item()`, eager indexing with a host value and `np.asarray`",
        written="Outside jit, the step picks the best row with `.item()` and an index, and "
        "turns the probabilities into NumPy.",
        why="`.item()` fetches the index to the host; indexing a device array with a Python "
        "`int` outside jit sends the index back to the device (the gate saw two `int32[]` "
        "copies for one `table[best]`); `np.asarray` copies the whole array to the host. "
        "Calling `jax.nn.softmax` eagerly copies a host scalar to the device as well, at the "
        "same line.",
        fix="Do the selection inside one jitted function: `jnp.argmax` and the indexing stay "
        "on the device, and the step returns device arrays.",
        leaky=("leaky_step",),
        fixed=("best_row", "fixed_step"),
    ),
    Recipe(
        slug="host_callback",
        title="A `jax.debug.callback` in compiled code",
        written="The jitted update logs its loss through `jax.debug.callback` (the same goes "
        "for `jax.debug.print`, `jax.pure_callback` and `io_callback`).",
        why="The callback runs on the host, so its operands leave the device on every step, "
        "a move JAX's guard never sees; the gate counts the callback's runs and reports them "
        "at the line that placed it. The `(+1 allowed)` is JAX's own: it hands the callback "
        "its operand as a `jax.Array`, with an explicit host-to-device `device_put`, charged to "
        "the line that called the jitted update (allowed under `disallow`; under "
        "`disallow_explicit` it fails there as an explicit transfer outside a boundary).",
        fix="Return the value from the jitted function and fetch it at a declared boundary.",
        leaky=("record_loss", "logged_update", "leaky_step"),
        fixed=("fetch_loss", "fixed_step"),
    ),
    Recipe(
        slug="flax_metrics",
        title="Metrics in a flax NNX + optax step",
        written="An `nnx.jit` train step returns its metrics and the loop turns each into a "
        "Python `float` for its logger.",
        why="Each `float()` waits for the step and fetches one scalar: two fetches, two "
        "stalls, every step.",
        fix="Keep the metrics a dict of device arrays and fetch the whole dict in one "
        "`jax.device_get` at a declared boundary (in a real loop, every N steps). The model "
        "and `nnx.Optimizer` are made in setup, outside the guard; the optax transformation "
        "once, at import.",
        leaky=("TX", "make_model_and_optimizer", "setup", "train", "leaky_step"),
        fixed=("fetch_metrics", "fixed_step"),
    ),
    Recipe(
        slug="equinox_metrics",
        title="A loss history in an equinox loop",
        written="An `eqx.filter_jit` step, and the loop appends `float(loss)` to a history "
        "every step.",
        why="`float(loss)` waits for the step and copies the loss to the host each time; the "
        "device idles while the host appends.",
        fix="Sum the loss on the device, inside the jitted step, and fetch the sum at a "
        "declared boundary every `LOG_EVERY` steps. The counter that decides when is a Python "
        "`int` that never reaches jit, so reading it moves nothing.",
        leaky=("TX", "LossLog", "train", "leaky_setup", "leaky_step"),
        fixed=("train_summed", "fetch_mean_loss", "fixed_setup", "fixed_step"),
    ),
    Recipe(
        slug="uncommitted",
        title="An uncommitted array moved to another device",
        written="The model was put on one device explicitly; the batch was made with "
        "`jnp.asarray`, without a device.",
        why="An array made without a device is *uncommitted*: it lives on the default device "
        "but may be moved. Meeting the model committed to the second device, it is copied "
        "there, on every step; JAX's guard checks that move only on a call's first (slow-path) "
        "run, which is why the gate maps the first call under the guard.",
        fix="Commit the inputs to the device the model is on, in setup: "
        "`jax.device_put(x, device)` (or give every input the same sharding).",
        leaky=("leaky_setup", "step"),
        fixed=("fixed_setup",),
        policy=POLICIES[1],
        whole_policy=True,
        note="This recipe needs two devices. On the CPU backend JAX makes them when "
        "`XLA_FLAGS=--xla_force_host_platform_device_count=2` is set before jax is imported; "
        "the policy's `env:` sets it in the worker that runs its regions (a policy with its "
        "own `env:` gets a worker of its own), so the gate's process and the other recipes "
        "keep one device.",
    ),
    Recipe(
        slug="warmup_schedule",
        title="A warmup learning rate passed as a static Python float",
        written="The loop computes the warmup learning rate in Python from its step counter and "
        "passes it to the jitted update as a static argument, so the update sees a plain "
        "number.",
        why="A static argument is part of the compiled program's key: every step's new rate "
        "compiles the update again, each compile far slower than the step. Nothing moves, and "
        "a region whose setup hands every run the same step never sees it: each run is step 0. "
        "The setups here take the run's index (`def leaky_setup(run)`), as the loop hands its "
        "step the step number, so every run is a later step, and the gate sees the update "
        "compiled again after warm-up.",
        fix="Keep the counter on the device (setup puts the run's index there) and evaluate the "
        "schedule inside the jitted update: `optax.linear_schedule` is a function of an array. "
        "The update compiles once.",
        leaky=("warmup_lr", "sgd_at", "leaky_setup", "leaky_step"),
        fixed=("SCHEDULE", "scheduled_sgd", "fixed_setup", "fixed_step"),
        why_heading="Why it is slow.",
    ),
)


class GenerationError(Exception):
    """The gate did not run, or said something the recipes do not expect: nothing is written."""


def run_gate(report_dir: Path) -> tuple[str, dict[str, Any]]:
    """One ``transfer-gate run`` of both recipe policies: its stdout and its JSON report."""
    json_path = report_dir / "cookbook.json"
    argv = [
        sys.executable, "-m", "gate", "run",
        *(str(p.relative_to(ROOT)) for p in POLICIES),
        "--no-baseline", "--color", "never",
        "--junit", str(report_dir / "cookbook.xml"), "--json", str(json_path),
    ]  # fmt: skip
    proc = subprocess.Popen(
        argv,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group: killed whole on timeout
    )
    try:
        out, err = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise GenerationError(f"transfer-gate run took over {TIMEOUT_S:.0f} s") from exc
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    if proc.returncode != 1 or not json_path.is_file():
        raise GenerationError(
            f"transfer-gate run exited {proc.returncode} (expected 1: the leaky regions fail)"
            f"\n--- stdout\n{out}\n--- stderr\n{err}"
        )
    return out, json.loads(json_path.read_text(encoding="utf-8"))


def marked_lines(path: Path) -> set[int]:
    """The lines of ``path`` marked ``# LEAK`` or ``# RECOMPILE``: where its leaky region must
    fail."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return {number for number, line in enumerate(lines, 1) if MARKER.search(line)}


def regions_by_classname(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["classname"]: r for suite in report["suites"] for r in suite["regions"]}


def problems(report: dict[str, Any]) -> list[str]:
    """What in the gate's report contradicts the recipes; empty when the page may be written."""
    regions = regions_by_classname(report)
    found = []
    expected = {r.classname(side) for r in RECIPES for side in ("leaky", "fixed")}
    found += [f"{name}: a region no recipe names" for name in sorted(set(regions) - expected)]
    for recipe in RECIPES:
        leaky, fixed = recipe.classname("leaky"), recipe.classname("fixed")
        if leaky not in regions or fixed not in regions:
            found.append(f"{recipe.slug}: the gate did not report {leaky} and {fixed}")
            continue
        if regions[fixed]["status"] != "passed":
            found.append(f"{fixed}: {regions[fixed]['status']}, expected to pass")
        if regions[leaky]["status"] != "failed":
            found.append(f"{leaky}: {regions[leaky]['status']}, expected to fail")
        where = str(recipe.path.relative_to(ROOT))
        failing = failing_lines(regions[leaky])
        marked = {(where, line) for line in marked_lines(recipe.path)}
        if failing != marked:
            found.append(
                f"{leaky}: failing transfers and recompiles at {sorted(failing)}, the "
                f"# LEAK and # RECOMPILE markers at {sorted(marked)}"
            )
    return found


def failing_lines(region: dict[str, Any]) -> set[tuple[str, int]]:
    """Where the region failed: each failing transfer's and recompile's (path, line)."""
    found = [*region["transfers"], *region.get("recompiles", ())]
    return {(f["path"], f["line"]) for f in found if f["failing"]}


def source_of(path: Path, names: tuple[str, ...]) -> str:
    """The top-level definitions ``names`` of ``path``, each with its decorators and the
    comment lines right above it, in the order given."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    nodes: dict[str, ast.stmt] = {}
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            nodes[node.name] = node
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            nodes.update((t.id, node) for t in targets if isinstance(t, ast.Name))
    pieces = []
    for name in names:
        node = nodes[name]
        decorators = getattr(node, "decorator_list", [])
        start = min([node.lineno, *(d.lineno for d in decorators)]) - 1
        while start > 0 and lines[start - 1].lstrip().startswith("#"):
            start -= 1
        assert node.end_lineno is not None
        pieces.append("\n".join(lines[start : node.end_lineno]))
    return "\n\n\n".join(pieces)


def policy_entries(recipe: Recipe) -> str:
    """The recipe's two regions as its policy file writes them (or the whole file)."""
    text = recipe.policy.read_text(encoding="utf-8")
    if recipe.whole_policy:
        return "\n".join(line for line in text.splitlines() if not line.startswith("#"))
    blocks = re.split(r"\n(?=  - name: )", text.split("\nregions:\n", 1)[1])
    wanted = {f"{recipe.slug}-leaky", f"{recipe.slug}-fixed"}
    chosen = [b.rstrip() for b in blocks if b.split("\n", 1)[0].split()[-1] in wanted]
    return "\n".join(["regions:", *chosen])


ROW = re.compile(r"^(PASS|FAIL|ERROR) +(\S+) +(.*)$")


def steady(text: str) -> str:
    """The gate's line without what it measured: the same on every run and every machine."""
    text = re.sub(r"median \d+(\.\d+)? [µm]?s", "median …", text)
    text = re.sub(r"\d+(\.\d+)? [kMGTP]?FLOP/step", "… FLOP/step", text)
    return re.sub(r"boundaries \d+(\.\d+)? [µmn]?s/step", "boundaries …/step", text)


def gate_output(stdout: str) -> dict[str, list[str]]:
    """Per region's classname: its summary row, then its findings block when it has one."""
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in stdout.splitlines():
        row = ROW.match(line)
        if row:
            verdict, name, rest = row.groups()
            found[name] = [steady(f"{verdict:<5} {name}  {rest}")]
            current = None
        elif re.fullmatch(r"\S+:", line) and line[:-1] in found:
            current = found[line[:-1]]
            current += ["", line]
        elif current is not None and line.startswith("  "):
            current.append(steady(line))
        else:
            current = None
    return found


HEADER = """\
# Cookbook: the transfers people write, and their fixes

<!-- Generated by docs/cookbook/generate.py from the recipes in docs/cookbook/ and the gate's
real output on them; do not edit by hand: run `{regenerate}`.
tests/test_cookbook.py fails when this page is stale. -->

Each recipe is a leaky step as people write it, what the gate reports for it, and the fixed
step, which passes. They are real regions: `docs/cookbook/cookbook.yaml` and
`docs/cookbook/two_devices.yaml` name one per leaky and per fixed step, and the output below
is what

```sh
transfer-gate run docs/cookbook/cookbook.yaml docs/cookbook/two_devices.yaml
```

prints for them on the CPU backend (the measured medians and FLOP counts shown as `…`). Each
leaky line is marked `# LEAK` in its module; the test holds the gate to failing there and
nowhere else, and to passing every fix. How to read a finding, and every field of the reports:
[Reports](reports.md). Where a transfer is seen on each platform:
[How it works](how-it-works.md#what-the-gate-sees-on-every-platform).

The policies set `python_path: [..]` (the folder `docs/`, relative to the policy file), so the
recipes import as `cookbook.*`; their defaults make the runs short (`warmup: 1`,
`guarded_runs: 1`, `repeats: 2`, `timing: off`), and every region keeps the default
`guard: disallow`, except the fixes with a boundary, which run under `disallow_explicit`.

Most recipes train the same small linear model, `docs/cookbook/model.py`:

```python
{model}
```

"""


def render(stdout: str) -> str:
    """The whole page, from the gate's stdout and the recipe modules."""
    output = gate_output(stdout)
    model = source_of(
        HERE / "model.py",
        ("numpy_batch", "device_batch", "init_weights", "make_inputs", "loss_fn", "sgd_update"),
    )
    parts = [HEADER.format(regenerate=REGENERATE, model=model)]
    parts += [f"{n}. [{r.title}](#{anchor(n, r.title)})\n" for n, r in enumerate(RECIPES, 1)]
    for number, recipe in enumerate(RECIPES, 1):
        module = recipe.path.relative_to(ROOT.joinpath("docs"))
        parts.append(
            f"\n## {number}. {recipe.title}\n\n"
            + (f"{recipe.note}\n\n" if recipe.note else "")
            + f"**What people write.** {recipe.written} From [`{module}`]({module}):\n\n"
            + f"```python\n{source_of(recipe.path, recipe.leaky)}\n```\n\n"
            + f"**{recipe.why_heading}** {recipe.why}\n\n"
            + "The gate says:\n\n"
            + "```\n" + "\n".join(output[recipe.classname("leaky")]) + "\n```\n\n"
            + f"**The fix.** {recipe.fix}\n\n"
            + f"```python\n{source_of(recipe.path, recipe.fixed)}\n```\n\n"
            + f"The regions, in `{recipe.policy.relative_to(ROOT)}`:\n\n"
            + f"```yaml\n{policy_entries(recipe)}\n```\n\n"
            + "The fixed region passes:\n\n"
            + "```\n" + "\n".join(output[recipe.classname("fixed")]) + "\n```\n"
        )  # fmt: skip
    return "".join(parts)


def anchor(number: int, title: str) -> str:
    """GitHub's anchor for the heading ``number. title`` (what tests/test_docs.py checks)."""
    text = f"{number}. {title}".lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="compare with docs/cookbook.md instead of writing it"
    )
    parser.add_argument(
        "--report-dir", type=Path, help="keep the gate's JSON and JUnit reports here"
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="cookbook-") as scratch:
        report_dir = args.report_dir or Path(scratch)
        report_dir.mkdir(parents=True, exist_ok=True)
        try:
            stdout, report = run_gate(report_dir)
        except GenerationError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    wrong = problems(report)
    if wrong:
        print("error: the gate's run does not match the recipes:", file=sys.stderr)
        print("\n".join(f"  {w}" for w in wrong), file=sys.stderr)
        return 1
    page = render(stdout)
    if not args.check:
        PAGE.write_text(page, encoding="utf-8")
        return 0
    committed = PAGE.read_text(encoding="utf-8") if PAGE.exists() else ""
    if committed == page:
        return 0
    diff = difflib.unified_diff(
        committed.splitlines(), page.splitlines(), "docs/cookbook.md", "regenerated", lineterm=""
    )
    print("\n".join(list(diff)[:60]), file=sys.stderr)
    print(f"error: docs/cookbook.md is stale; regenerate it with `{REGENERATE}`", file=sys.stderr)
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
