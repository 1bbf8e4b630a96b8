"""The command line's grammar: every subcommand of ``transfer-gate``, and its options.

Parsing only: `gate.cli.main` hands the parsed arguments to one subcommand.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from typing import TYPE_CHECKING, Any

from gate.cli.exit_codes import (
    DoctorExitCode,
    ExitCode,
    command_exit_codes_help,
    exit_codes_help,
)
from gate.files import DEFAULT_POLICIES
from gate.machine.diagnosis import Platform
from gate.package import __version__, docs_url
from gate.plan import parse_shard
from gate.printable import printable
from gate.report.history_series import MAIN_BRANCH

if TYPE_CHECKING:
    from _typeshed import SupportsWrite
from gate.results.baseline import DEFAULT_NAME as DEFAULT_BASELINE_NAME

SCHEMA_DOCUMENTS = ("policy", "baseline", "report", "history")
# Where `transfer-gate schema --write` keeps the policy schema in a repository, and so where
# `init`'s modeline points (relative to the policy: policies/x.yaml -> ../.transfer-gate/...).
DEFAULT_SCHEMA_FILE = ".transfer-gate/policy.schema.json"
DEFAULT_JUNIT = "reports/transfer-gate.xml"
DEFAULT_BASELINE_HELP = f"{DEFAULT_BASELINE_NAME} in the first PATH's folder"
_EXIT_CODES_HELP = exit_codes_help(ExitCode)
_INIT_EXIT_CODES = """exit codes:
  0  the policy was written
  2  usage error: a callable not spelt MODULE:QUALNAME, or FILE exists already
  3  the gate itself broke (a bug: please report it)"""


def _time_budget(text: str) -> float:
    """``--time-budget``: a positive number of seconds."""
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < seconds < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: the budget must be more than 0 seconds")
    return seconds


_PATHS_HELP = f"policy files or folders of them (*.yaml, *.yml); default: {DEFAULT_POLICIES}/"


def command_parser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    """The parser of ``command``, for an error in its own usage (`gate.cli.main`)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found: argparse.ArgumentParser = action.choices[command]
            return found
    return parser


class _Parser(argparse.ArgumentParser):
    """argparse, its usage, help and errors (which quote the command line) through the text
    gate: ``--base $'HEAD\\n::error::x'`` must not print a workflow command. Help wraps
    between words only, so that a docs address (``jax-transfer-gate/blob/...``) stays whole."""

    def __init__(self, **kwargs: Any) -> None:
        formatter = kwargs.pop("formatter_class", argparse.HelpFormatter)
        super().__init__(formatter_class=_whole_words(formatter), **kwargs)

    def _print_message(self, message: str, file: SupportsWrite[str] | None = None) -> None:
        if message:
            (sys.stderr if file is None else file).write(printable(message))


def _whole_words(base: type[argparse.HelpFormatter]) -> type[argparse.HelpFormatter]:
    """``base``, wrapping each option's help at spaces alone: never inside a hyphenated word
    or an address."""

    class WholeWords(base):  # type: ignore[valid-type,misc]  # a class made from an argument
        def _split_lines(self, text: str, width: int) -> list[str]:
            return textwrap.wrap(
                " ".join(text.split()), width, break_on_hyphens=False, break_long_words=False
            )

    return WholeWords


def build_parser() -> argparse.ArgumentParser:
    """The command line of every subcommand; parsing only, nothing runs."""
    # allow_abbrev=False everywhere: a prefix must never quietly mean another
    # option (`--baseli` would be taken as `--baseline`).
    parser = _Parser(
        prog="transfer-gate",
        allow_abbrev=False,
        description="Fail CI on implicit host/device transfers in JAX code regions "
        f"named by YAML policies.\nDocs: {docs_url('README.md')}",
        epilog=_EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = commands.add_parser(
        "run",
        allow_abbrev=False,
        help="run every region under the transfer guard and write a JUnit report",
        epilog=_EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("paths", nargs="*", metavar="PATH", help=_PATHS_HELP)
    run.add_argument(
        "--junit",
        default=DEFAULT_JUNIT,
        metavar="FILE",
        help=f"where to write the JUnit report (default: {DEFAULT_JUNIT})",
    )
    run.add_argument(
        "--region",
        action="append",
        metavar="NAME",
        help="run only this region (NAME or SUITE.NAME); repeatable",
    )
    run.add_argument(
        "--shard",
        type=parse_shard,
        metavar="K/N",
        help="run only shard K of N: the regions are split the same way on every machine "
        "(merge the shards' reports with `transfer-gate merge`)",
    )
    run.add_argument(
        "--json",
        metavar="FILE",
        help="also write the full transfer map as JSON (format: "
        f"{docs_url('docs/reports.md', 'json-report')})",
    )
    run.add_argument(
        "--baseline",
        metavar="FILE",
        help="fail only on transfers not accepted in this baseline (default: "
        f"{DEFAULT_BASELINE_HELP}, used when it exists)",
    )
    run.add_argument(
        "--no-baseline",
        action="store_true",
        help="ignore any baseline: every implicit transfer fails",
    )
    run.add_argument(
        "--no-timing-baseline",
        action="store_true",
        help="compare no step time with the baseline's (the transfers it accepts still apply): "
        "for a shared runner, such as GitHub's hosted ones, whose timing says nothing about "
        "the code",
    )
    run.add_argument(
        "--write-references",
        action="store_true",
        help="write each region's outputs to its checks.reference file (creating or "
        "replacing it) instead of comparing them; review the change before committing it",
    )
    run.add_argument(
        "--require-platform",
        # Accelerators first, as --help has always listed them.
        choices=[p.value for p in (Platform.GPU, Platform.TPU, Platform.CPU)],
        help="fail every region (exit 1) when JAX runs elsewhere; overrides the policies' "
        "`platform:`",
    )
    run.add_argument(
        "--base",
        metavar="REF",
        help="also run every region from the git commit REF (a branch, tag or SHA: the pull "
        "request's base, HEAD~1), checked out in a temporary worktree, and compare; the head "
        "is the working tree as it is (in CI, check out the full history: fetch-depth: 0)",
    )
    loudness = run.add_mutually_exclusive_group()
    loudness.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="print only the regions that failed (live and in the summary) and the count",
    )
    loudness.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="also list every transfer that passes, and why (accepted, in the base, allowed)",
    )
    run.add_argument(
        "--color",
        choices=["auto", "always", "never"],
        default="auto",
        help="colour the verdicts: auto (default) on a terminal only; NO_COLOR turns auto off "
        "and FORCE_COLOR on",
    )
    run.add_argument(
        "--time-budget",
        type=_time_budget,
        metavar="SECONDS",
        help="stop after SECONDS as if cancelled: the running region and those after it "
        "become errors, the report is written and the run exits 1 (set it below the CI "
        "job's timeout, which kills without a report)",
    )

    baseline = commands.add_parser(
        "baseline",
        allow_abbrev=False,
        help="run every region and accept the transfers it has today in a baseline file",
        epilog=command_exit_codes_help("baseline"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    baseline.add_argument("paths", nargs="*", metavar="PATH", help=_PATHS_HELP)
    baseline.add_argument(
        "--baseline",
        metavar="FILE",
        help=f"where to write it (default: {DEFAULT_BASELINE_HELP})",
    )
    baseline.add_argument(
        "--region",
        action="append",
        metavar="NAME",
        help="re-baseline only this region (NAME or SUITE.NAME), keeping the others' entries; "
        "repeatable",
    )
    part = baseline.add_mutually_exclusive_group()
    part.add_argument(
        "--timing-only",
        action="store_true",
        help="record the step times, XLA's figures, collectives and unused donations, and the "
        "machine; accept no transfer (the file's accepted transfers stay as they are)",
    )
    part.add_argument(
        "--transfers-only",
        action="store_true",
        help="accept the transfers the regions make now; leave the stored timing as it is",
    )

    validate = commands.add_parser(
        "validate",
        allow_abbrev=False,
        help="check policies and that every named callable imports, without running any step",
        epilog=command_exit_codes_help("validate"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    validate.add_argument("paths", nargs="*", metavar="PATH", help=_PATHS_HELP)

    doctor = commands.add_parser(
        "doctor",
        allow_abbrev=False,
        help="show what JAX sees here (devices, versions, settings) and check for an accelerator",
        epilog=exit_codes_help(DoctorExitCode),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    doctor.add_argument(
        "--expect",
        choices=[p.value for p in Platform],
        help="fail (exit 1) unless JAX runs on this kind of device",
    )
    doctor.add_argument(
        "--requirements",
        action="append",
        metavar="FILE",
        help="also fail (exit 1) unless the installed jax, jaxlib and GPU plugins meet the "
        "requirements on them in FILE: pyproject.toml (any *.toml) or a pip requirements file; "
        f"repeatable ({docs_url('docs/dependencies.md')})",
    )

    merge = commands.add_parser(
        "merge",
        allow_abbrev=False,
        help="combine the reports of several shards (JUnit .xml or JSON .json) into one",
        # Raw, for the exit codes' table: the description's line breaks are its own.
        description="Combine the shards' reports into OUT, all JUnit (.xml) or all the gate's\n"
        "JSON (.json), read from OUT's suffix; OUT may be one of the inputs.",
        epilog=command_exit_codes_help("merge"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    merge.add_argument("output", metavar="OUT")
    merge.add_argument("inputs", nargs="+", metavar="IN")

    history = commands.add_parser(
        "history",
        allow_abbrev=False,
        help="each region's figures across commits: a page of charts, the data, the drift check",
        description="Read the JSON reports of many runs (files, or folders of *.json) and write\n"
        "DIR/index.html (one self-contained page of charts) and DIR/history.json (the same\n"
        "series as data). --check fails on a figure that grew beyond the policy's drift:\n"
        f"bounds over the window ({docs_url('docs/history.md')}).",
        epilog=command_exit_codes_help("history"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    history.add_argument("reports", nargs="+", metavar="REPORT", help="a JSON report or a folder")
    history.add_argument(
        "--out", required=True, metavar="DIR", help="the folder for index.html and history.json"
    )
    history.add_argument(
        "--check",
        action="store_true",
        help="exit 1 when a region of the newest report (the last given) drifted beyond its "
        "policy's drift: bounds, or the newest report left out a region the run before held "
        "(the policies are read from this repository)",
    )
    which = history.add_mutually_exclusive_group()
    which.add_argument(
        "--branch",
        default=MAIN_BRANCH,
        metavar="NAME",
        help=f"draw the runs of this branch (default: {MAIN_BRANCH}); the newest report is "
        "drawn whatever its branch, as a line of its own",
    )
    which.add_argument(
        "--every-branch",
        action="store_true",
        help="draw every branch's runs, a line each, never joined",
    )
    history.add_argument(
        "--markdown",
        metavar="FILE",
        help="also write each region's recent step-time trend as a Markdown table (a pull "
        "request's job summary)",
    )
    history.add_argument(
        "--page-url",
        metavar="URL",
        help="where the page is published (GitHub Pages): the Markdown links each region there",
    )

    init = commands.add_parser(
        "init",
        allow_abbrev=False,
        help="write a commented starter policy for a step (never overwrites a file)",
        description="Write a commented starter policy for the step MODULE:QUALNAME, with the "
        "schema modeline for editors. Nothing is imported: check it with `transfer-gate "
        "validate FILE`.",
        epilog=_INIT_EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    init.add_argument("step", metavar="MODULE:STEP", help="the step, e.g. examples.mlp:train_step")
    init.add_argument(
        "--setup", metavar="MODULE:SETUP", help="the function that makes the step's inputs"
    )
    init.add_argument(
        "--boundary",
        action="append",
        metavar="MODULE:FN",
        help="a function where explicit transfers are meant to happen; repeatable",
    )
    init.add_argument(
        "--output",
        metavar="FILE",
        help=f"where to write it (default: {DEFAULT_POLICIES}/<the step module's last part>.yaml)",
    )

    schema = commands.add_parser(
        "schema",
        allow_abbrev=False,
        help="print the JSON Schema of a policy (for an editor: "
        f"{docs_url('docs/policy.md')}), "
        "the baseline file or the JSON report",
    )
    schema.add_argument(
        "document",
        nargs="?",
        choices=SCHEMA_DOCUMENTS,
        default="policy",
        help="whose schema (default: policy)",
    )
    schema.add_argument(
        "--write",
        metavar="FILE",
        help="write it to FILE (for the policy: where `init`'s modeline points, e.g. "
        f"{DEFAULT_SCHEMA_FILE}) instead of printing it",
    )
    return parser
