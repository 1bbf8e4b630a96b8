"""A starter policy for one step: the commented YAML that ``transfer-gate init`` writes.

Text only: nothing is imported here (``transfer-gate validate`` imports the callables; what a
step takes is read from its source, `gate.policy.step_source`). The defaults it shows come
from `BUILTIN_DEFAULTS`, so the starter cannot drift from what the loader does; the modeline
names the schema file `transfer-gate schema --write` keeps in the repository, which resolves
offline and matches the installed gate.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

import yaml

from gate.package import docs_url
from gate.policy.defaults import default
from gate.policy.load import BUILTIN_DEFAULTS
from gate.policy.schema import policy_schema

# What a default key does, shown next to it in the starter (commented out: the value is
# already what the region gets).
_DEFAULT_NOTES = {
    "warmup": "unguarded runs after the first call",
    "guarded_runs": "runs under the guard",
    "repeats": "timed runs",
    "timeout_s": "seconds the region may take in all",
    "recompiles": "a compilation after warm-up: fail, warn or allow",
    "collectives": "a collective the base does not run: fail, warn or allow",
    "donation": "a donated argument no output reuses: fail_new, fail, warn or allow",
    "compare": "run --base runs it from the base too: changed (what it read) or always",
}


def modeline(schema: str) -> str:
    """The comment that points the YAML language server (VS Code, Neovim, ...) at ``schema``."""
    return f"# yaml-language-server: $schema={schema}"


def is_callable_spec(text: str) -> bool:
    """Whether ``text`` is spelt as the schema wants a callable: ``module:qualname``."""
    return re.fullmatch(str(policy_schema()["$defs"]["callable"]["pattern"]), text) is not None


def _scalar(text: str) -> str:
    """``text`` as a YAML scalar: plain where YAML reads it back as that string, else quoted."""
    try:
        plain_reads_as = yaml.safe_load(text)
    except yaml.YAMLError:
        plain_reads_as = None
    return text if plain_reads_as == text else json.dumps(text)


def _line(code: str, note: str) -> str:
    """One line with its note in a column, as in docs/policy.md."""
    return f"{code:<38} # {note}" if note else code


def setup_stub(step: str) -> str:
    """The setup a starter names for a step that takes arguments: ``pkg.mod:train_step_inputs``."""
    module, _, qualname = step.partition(":")
    return f"{module}:{qualname.rpartition('.')[2]}_inputs"


def starter_policy(
    step: str,
    setup: str | None,
    boundaries: Sequence[str],
    schema: str,
    needs: Sequence[str] = (),
) -> str:
    """The starter policy for ``step`` (``module:qualname``), valid as written once the step
    can be called; its modeline names ``schema``, the path of the policy schema in the
    repository, from the policy. ``needs``, the step's parameters without a default, get a
    `setup_stub` to write when no ``setup`` is given."""
    name = step.rpartition(":")[2].rpartition(".")[2]
    lines = [
        modeline(schema),
        "# A transfer-gate policy, started by `transfer-gate init`.",
        f"# Every key and its default: {docs_url('docs/policy.md')}",
        "# A region is one iteration of the real loop, data loading included; setup makes what",
        "# the loop carries (the state, a batch iterator), fresh before every run.",
        "# `transfer-gate validate` checks it and imports the callables; `transfer-gate run`",
        "# runs each region under JAX's transfer guard.",
        _line("version: 1", "the policy format; required"),
        _line("# suite: NAME", "the JUnit testsuite; default: this file's name"),
        _line("# python_path: [../src]", "folders to import from, relative to this file"),
        "defaults:",
        _line(f"  guard: {BUILTIN_DEFAULTS['guard']}", "every implicit transfer fails"),
    ]
    lines += [
        _line(f"  # {key}: {BUILTIN_DEFAULTS[key]}", note) for key, note in _DEFAULT_NOTES.items()
    ]
    leaks = default("memory.leaks")
    lines.append(
        _line(
            f"  # memory: {{leaks: {leaks}}}", "device arrays kept every run: fail, warn or allow"
        )
    )
    lines += [
        "regions:",
        _line(f"  - name: {_scalar(name)}", "unique in this file"),
        _line(f"    step: {_scalar(step)}", "the code under the guard; returns its outputs"),
    ]
    if setup is None and needs:
        returns = f"to write: returns ({', '.join(needs)})"
        lines.append(_line(f"    setup: {_scalar(setup_stub(step))}", returns))
    elif setup is None:
        lines.append(
            _line("    # setup: MODULE:FUNCTION", "fresh inputs before every run: a tuple or dict")
        )
    else:
        lines.append(_line(f"    setup: {_scalar(setup)}", "fresh inputs before every run"))
    if boundaries:
        lines.append(_line("    boundaries:", "where explicit transfers (device_get) are meant"))
        lines += [f"      - {_scalar(b)}" for b in boundaries]
    else:
        lines.append(
            _line("    # boundaries: [MODULE:FUNCTION]", "where explicit transfers are meant")
        )
    lines += [
        _line("    # checks:", "on the step's outputs"),
        _line("    #   finite: true", "no NaN or Inf in any output leaf"),
    ]
    return "\n".join(lines) + "\n"
