"""``transfer-gate init``: write a commented starter policy for a step; never overwrite one."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from gate.cli.errors import UsageError
from gate.cli.exit_codes import ExitCode
from gate.cli.parser import DEFAULT_JUNIT, DEFAULT_SCHEMA_FILE
from gate.cli.schema import schema_text
from gate.files import DEFAULT_POLICIES, write_text_atomically
from gate.package import docs_url
from gate.policy.problems import display_path
from gate.policy.starter import is_callable_spec, setup_stub, starter_policy
from gate.policy.step_source import jitted_by, loop_calls, module_file, read_step
from gate.printable import say


def default_output(step: str) -> str:
    """``policies/<module's last part>.yaml``: ``examples.mlp:f`` -> ``policies/mlp.yaml``."""
    module = step.partition(":")[0]
    return f"{DEFAULT_POLICIES}/{module.rpartition('.')[2]}.yaml"


def init_command(args: argparse.Namespace, repo_root: Path) -> ExitCode:
    """Write the starter policy to ``--output`` (under ``repo_root``); say how to check it."""
    named = [("MODULE:STEP", args.step)]
    named += [("--setup", args.setup)] if args.setup is not None else []
    named += [("--boundary", b) for b in args.boundary or ()]
    for option, spec in named:
        if not is_callable_spec(spec):
            raise UsageError(
                f"init {option}: {spec!r} is not MODULE:QUALNAME; "
                "spell it like examples.mlp:train_step"
            )
    shown = args.output or default_output(args.step)
    target = repo_root / shown
    if Path(shown).suffix not in (".yaml", ".yml"):
        raise UsageError(
            f"init --output {shown}: name a .yaml or .yml file (a folder of policies is read "
            "for those only)"
        )
    schema = repo_root / DEFAULT_SCHEMA_FILE
    modeline_path = Path(os.path.relpath(schema, target.parent)).as_posix()
    needs, note = _step_needs(args.step, args.setup, repo_root)
    text = starter_policy(args.step, args.setup, args.boundary or (), modeline_path, needs)
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        # "x": created here or not at all, so a policy someone has edited is never replaced.
        with target.open("x", encoding="utf-8") as out:
            out.write(text)
    except FileExistsError:
        raise UsageError(
            f"{shown} already exists; init never overwrites a policy: "
            "name another file with --output FILE"
        ) from None
    say(f"wrote {shown}; check it with `transfer-gate validate {shown}`")
    if note:
        say(note)
    warning = _jitted_step(args.step, repo_root)
    if warning:
        say(warning)
    if not schema.exists():
        # What the modeline names, so that an editor completes keys at once.
        write_text_atomically(schema, schema_text("policy"))
        say(
            f"wrote {DEFAULT_SCHEMA_FILE}, the schema its first line names for editors; "
            f"refresh it after upgrading the gate: `transfer-gate schema --write "
            f"{DEFAULT_SCHEMA_FILE}`"
        )
    ignored = _ignore_reports(repo_root)
    if ignored:
        say(ignored)
    say("(init imports nothing: validate imports the step, setup and boundaries)")
    return ExitCode.OK


def _ignore_reports(repo_root: Path) -> str:
    """Add the reports' folder to ``.gitignore`` (made if need be), unless a line already
    names it; what was done, or ""."""
    folder = DEFAULT_JUNIT.partition("/")[0]
    path = repo_root / ".gitignore"
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    if any(line.strip().strip("/") == folder for line in text.splitlines()):
        return ""
    separator = "" if not text or text.endswith("\n") else "\n"
    write_text_atomically(path, f"{text}{separator}{folder}/\n")
    return f"added {folder}/ to .gitignore: each run writes its reports there"


def _jitted_step(step: str, repo_root: Path) -> str:
    """A warning when ``step`` is itself a jitted function, offering the loop that calls it:
    a region is one iteration of the real loop, so that what the loop does around the jitted
    call (a NumPy batch from the loader, ``print(float(loss))``) runs under the guard too."""
    module, _, qualname = step.partition(":")
    how = jitted_by(module, qualname, [repo_root])
    if how is None:
        return ""
    loops = loop_calls(module, qualname, [repo_root])
    where = (
        f"{loops[0].function}'s loop at {display_path(loops[0].path, repo_root)}:{loops[0].line}"
        if loops
        else "the loop that calls it"
    )
    if loops:
        module = _loop_module(module, loops[0].path, repo_root)
    return (
        f"warning: {qualname} is itself a jitted function ({how}): gated alone, the region "
        "never sees what the loop around it moves (a NumPy batch from the loader, "
        f"print(float(loss))).\n  Gate one pass of {where} instead: move that pass into a "
        "function (the next batch from the real loader, the step, the metrics it fetches) "
        "that the loop calls, and a setup that makes what the loop carries (the state, an "
        f"iterator of batches); then, in place of this policy: `transfer-gate init "
        f"{module}:train_iteration --setup {module}:loop_state`.\n"
        f"  {docs_url('README.md', 'what-to-gate')}"
    )


def _loop_module(step_module: str, loop_file: Path, repo_root: Path) -> str:
    """The module name of ``loop_file``, a file in the folder of ``step_module``'s: its package
    is the step's own where the step is a package's ``__init__.py``, else the step's parent."""
    step_file = module_file(step_module, [repo_root])
    in_init = step_file is not None and step_file.name == "__init__.py"
    package = step_module if in_init else step_module.rpartition(".")[0]
    if loop_file.name == "__init__.py":
        return package or step_module
    return f"{package}.{loop_file.stem}" if package else loop_file.stem


def _step_needs(step: str, setup: str | None, repo_root: Path) -> tuple[tuple[str, ...], str]:
    """The step's parameters without a default when there is no setup to give them (read
    from its source: init imports nothing), and what to tell the user about them."""
    if setup is not None:
        return (), ""
    module, _, qualname = step.partition(":")
    found = read_step(module, qualname, [repo_root])
    if isinstance(found, str):
        return (), (
            f"{step}'s parameters were not read ({found}): if it takes any, give the region "
            "a setup that returns them; validate will say"
        )
    if not found.required:
        return (), ""
    where = f"{display_path(found.path, repo_root)}:{found.line}"
    return found.required, (
        f"{qualname} ({where}) takes {', '.join(found.required)}: write {setup_stub(step)}, "
        "a function that returns them (a tuple in that order, or a dict by name), or point "
        "setup: at one you have; validate fails until it imports"
    )
