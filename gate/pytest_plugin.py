"""The ``transfer_gate`` pytest fixture: a region checked inside a test, failing it like an assert.

Loaded by pytest only (the ``pytest11`` entry point), so pytest is no dependency of the gate's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from gate.results.records import RegionResult


class TransferGate:
    """What the ``transfer_gate`` fixture gives a test."""

    def check(self, step: Callable[..., Any], **options: Any) -> RegionResult:
        """Run `gate.check_region(step, **options)`; fail the test with its report if it fails."""
        # Imported here: pytest loads this plugin in every session, most of which never use it.
        from gate.api import check_region, format_failure

        result = check_region(step, **options)
        if not result.passed:
            # pytrace=False: the gate's report is the message, in the terminal and in --junitxml.
            pytest.fail(format_failure(result), pytrace=False)
        return result


@pytest.fixture
def transfer_gate() -> TransferGate:
    """Check a step for host/device transfers: ``transfer_gate.check(step, setup=...)``."""
    return TransferGate()
