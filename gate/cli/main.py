"""The command line: ``transfer-gate run|baseline|validate|doctor|merge|history|init|schema``.

`main(argv) -> int` is the only entry point: it parses (`gate.cli.parser`),
hands the arguments to one subcommand, and returns its exit code; exceptions
become exit codes in one place (`gate.cli.errors`).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from gate.cli.baseline import baseline_command
from gate.cli.doctor import main_doctor
from gate.cli.errors import exit_code_of
from gate.cli.history import history_command
from gate.cli.init import init_command
from gate.cli.parser import build_parser, command_parser
from gate.cli.run import run_command
from gate.cli.schema import schema_command
from gate.cli.validate import validate_command
from gate.isolation.environment import prepare_environment
from gate.report.merge import main_merge

_IN_REPOSITORY: dict[str, Callable[[argparse.Namespace, Path], int]] = {
    "run": run_command,
    "baseline": baseline_command,
    "validate": validate_command,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (see `gate.cli.exit_codes`), never exits."""
    parser = build_parser()
    try:
        args, unknown = parser.parse_known_args(argv)
        if unknown:
            # In the command's own usage: argparse would print the top-level one, which does
            # not show the command's options.
            command_parser(parser, args.command).error(
                f"unrecognized arguments: {' '.join(unknown)}"
            )
    except SystemExit as exc:  # --help, --version, or a usage error argparse has printed
        return exc.code if isinstance(exc.code, int) else 0
    return exit_code_of(args.command, lambda: _dispatch(args))


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "doctor":
        # Before prepare_environment: doctor reports the settings the job gave the gate.
        return main_doctor(args.expect, requirements=args.requirements or ())
    # Neither imports jax nor the user's code.
    if args.command == "schema":
        return schema_command(args.document, args.write)
    if args.command == "init":
        return init_command(args, Path.cwd())
    # Reads reports and policies; imports neither jax nor the user's code.
    if args.command == "history":
        return history_command(args, Path.cwd())
    # Before anything imports jax (user modules do, while policies are checked).
    prepare_environment(os.environ)
    if args.command == "merge":
        return main_merge(args.output, args.inputs)
    return _IN_REPOSITORY[args.command](args, Path.cwd())
