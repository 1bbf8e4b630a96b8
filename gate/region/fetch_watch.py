"""The device-to-host detector around the region's code, and why it could not run where not."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass

from gate.user_code import UserCode
from gate.witness.detector import detect_fetches
from gate.witness.fetches import DetectorUnavailable, FetchLog


@dataclass
class FetchWatch:
    """Opens the detector for one run (or setup, or the whole region) as often as asked.

    The first `DetectorUnavailable` is kept: this JAX lacks a hook the
    detector needs, so every later attempt would fail the same way.
    """

    user: UserCode
    boundary_of: Callable[[], str | None]  # the declared boundary running now, if any
    missing: str | None = None  # why the device-to-host detector could not run
    blind_spots: tuple[str, ...] = ()  # what it cannot see here (`FetchLog.blind_spots`)

    @contextmanager
    def detector(self) -> Iterator[FetchLog | None]:
        """The device-to-host detector for one run, or None where it cannot run."""
        with ExitStack() as stack:
            log = None
            if self.missing is None:
                try:
                    log = stack.enter_context(detect_fetches(self.user, self.boundary_of))
                except DetectorUnavailable as exc:  # raised before anything was patched
                    self.missing = str(exc)
                else:
                    self.blind_spots = log.blind_spots
            yield log


@contextmanager
def watching_reads(user: UserCode) -> Iterator[None]:
    """The detector around code outside any run, only to mark what it reads as host-cached."""
    with ExitStack() as stack:
        with suppress(DetectorUnavailable):  # the region's own detector will say why
            stack.enter_context(detect_fetches(user, lambda: None))
        yield
