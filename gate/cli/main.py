"""The command line: ``transfer-gate run|baseline|validate|doctor|merge|history|init|schema``.

`main(argv) -> int` is the only entry point: it parses (`gate.cli.parser`),
hands the arguments to one subcommand, and returns its exit code; exceptions
become exit codes in one place (`gate.cli.errors`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from gate.files import DEFAULT_POLICIES
from gate.isolation.spawn import start_first_worker, stop_first_worker

if TYPE_CHECKING:
    import argparse

# The commands that run regions: their first worker starts as the gate does.
_RUNS_REGIONS = ("run", "baseline")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (see `gate.cli.exit_codes`), never exits."""
    given = list(sys.argv[1:] if argv is None else argv)
    # Before the rest of the gate is imported (the commands' modules below, ~0.25 s on a CPU
    # machine, ~0.7 s on a TPU host): a worker spends that and more importing jax and starting
    # its backend. A region that wants another environment, a usage error, or a run that ends
    # before any region lets it go.
    if not (given[:1] and given[0] in _RUNS_REGIONS and not {"-h", "--help"} & set(given)):
        return _main(given)
    with _terminated_as_exit():
        # The policies it may read: the default folder and whatever else it was given (an
        # option's value among them does no harm).
        named = [arg for arg in given[1:] if not arg.startswith("-")]
        start_first_worker(Path.cwd(), os.environ, [DEFAULT_POLICIES, *named])
        try:
            return _main(given)
        finally:
            stop_first_worker()


@contextlib.contextmanager
def _terminated_as_exit() -> Iterator[None]:
    """SIGTERM ends the gate through its ``finally`` blocks, which stop the first worker.

    The worker runs in a session of its own (so that stopping it stops its children), so no
    signal sent to the gate's group reaches it; until the run's own handlers are in
    (`gate.isolation.cancellation.cancel_on_signals`, which cancel the run and write its
    report), SIGTERM's default action would end the gate alone and leave the worker starting
    up, holding a TPU chip for seconds. Only where nothing else handles SIGTERM.
    """
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    ):
        yield
        return

    def terminated(signum: int, frame: FrameType | None) -> None:
        del frame
        raise SystemExit(128 + signum)  # the status a shell reports for the signal

    signal.signal(signal.SIGTERM, terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _main(argv: list[str]) -> int:
    from gate.cli.errors import exit_code_of
    from gate.cli.parser import build_parser, command_parser

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
    # Each command's module imported here, once `main` has started the first worker.
    if args.command == "doctor":
        from gate.cli.doctor import main_doctor

        # Before prepare_environment: doctor reports the settings the job gave the gate.
        return main_doctor(args.expect, requirements=args.requirements or ())
    # Neither imports jax nor the user's code.
    if args.command == "schema":
        from gate.cli.schema import schema_command

        return schema_command(args.document, args.write)
    if args.command == "init":
        from gate.cli.init import init_command

        return init_command(args, Path.cwd())
    # Reads reports and policies; imports neither jax nor the user's code.
    if args.command == "history":
        from gate.cli.history import history_command

        return history_command(args, Path.cwd())
    from gate.isolation.environment import prepare_environment

    # Before anything imports jax (user modules do, while policies are checked).
    prepare_environment(os.environ)
    if args.command == "merge":
        from gate.report.merge import main_merge

        return main_merge(args.output, args.inputs)
    return _in_repository(args.command)(args, Path.cwd())


def _in_repository(command: str) -> Callable[[argparse.Namespace, Path], int]:
    """The command that runs in the repository the gate is started in."""
    if command == "run":
        from gate.cli.run import run_command

        return run_command
    if command == "baseline":
        from gate.cli.baseline import baseline_command

        return baseline_command
    from gate.cli.validate import validate_command

    return validate_command
