"""The plan: which regions a command runs, from the policies, ``--region`` and ``--shard``.

``--region`` names a region as ``NAME`` or ``SUITE.NAME``; `Plan.make` checks
those names and applies them (and the shard), and the scheduler runs `Plan.steps`.

``--shard K/N`` is one matrix job's share of the selected regions. Regions
are keyed ``suite.region`` and sorted by code point (no locale, no hash
seed), then dealt round-robin: shard K gets the K-th, (K+N)-th, … key.
Every machine makes the same split, every region lands in exactly one
shard, and the shards differ in size by at most one region. Regions that
share a key (two policy files with the same suite and region name) go to
the same shard together.

A shard that gets no region still writes a report, with zero tests, and
passes: a matrix may have more jobs than a repository has regions.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from dataclasses import dataclass

from gate.policy.model import Policy, Region
from gate.results import records
from gate.text import counted, did_you_mean

_SHARD = re.compile(r"(?P<index>[0-9]+)/(?P<count>[0-9]+)")


@dataclass(frozen=True)
class Shard:
    """Shard `index` of `count`, counted from 1 as CI matrices usually are."""

    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str) -> Shard:
    """``K/N`` with 1 <= K <= N; an argparse type, so errors read as usage errors."""
    found = _SHARD.fullmatch(text.strip())
    if found is None:
        raise argparse.ArgumentTypeError(
            f"'{text}' is not K/N; write the shard as its number and the number of shards, "
            "e.g. --shard 1/4"
        )
    index, count = int(found["index"]), int(found["count"])
    if count < 1 or not 1 <= index <= count:
        raise argparse.ArgumentTypeError(
            f"'{text}': K must be between 1 and N, and N at least 1, e.g. --shard 1/{max(count, 1)}"
        )
    return Shard(index, count)


@dataclass(frozen=True)
class ShardSelection:
    """What one shard runs, out of the regions the command line selected."""

    shard: Shard
    regions: frozenset[str]  # ``suite.region`` keys this shard runs
    total: int  # distinct keys over all shards

    def describe(self) -> str:
        if not self.regions:
            return (
                f"shard {self.shard}: no regions to run (the {self.total} selected are split "
                f"over {counted(self.shard.count, 'shard')}); writing a report with zero tests"
            )
        return f"shard {self.shard}: running {len(self.regions)} of {counted(self.total, 'region')}"


class UnknownRegionError(Exception):
    """A ``--region`` names no region of the policies; nothing was run."""


def region_key(policy: Policy, region: Region) -> str:
    """``suite.region`` of ``region`` in ``policy`` (`gate.results.records.region_key`)."""
    return records.region_key(policy.suite, region.name)


def _named(policy: Policy, region: Region, names: frozenset[str] | None) -> bool:
    return names is None or region.name in names or region_key(policy, region) in names


def select_shard(
    policies: Sequence[Policy], shard: Shard, only: frozenset[str] | None = None
) -> ShardSelection:
    """The regions of `shard`, among those `only` selects (``NAME`` or ``SUITE.NAME``)."""
    keys = sorted(
        {
            region_key(policy, region)
            for policy in policies
            for region in policy.regions
            if _named(policy, region, only)
        }
    )
    mine = frozenset(keys[shard.index - 1 :: shard.count])
    return ShardSelection(shard, mine, len(keys))


@dataclass(frozen=True)
class Plan:
    """The regions to run, per policy in the policies' order, and the shard they came from."""

    steps: tuple[tuple[Policy, tuple[Region, ...]], ...]
    shard: ShardSelection | None = None

    @classmethod
    def make(
        cls,
        policies: Sequence[Policy],
        regions: Sequence[str] | None = None,
        shard: Shard | None = None,
    ) -> Plan:
        """Every region, or those ``regions`` names (``NAME`` or ``SUITE.NAME``), of ``shard``.

        Raises UnknownRegionError for a name no policy defines.
        """
        wanted = frozenset(regions) if regions else None
        if wanted is not None:
            known = {n for p in policies for r in p.regions for n in (r.name, region_key(p, r))}
            missing = [name for name in regions or () if name not in known]
            if missing:
                names = ", ".join(sorted(r.name for p in policies for r in p.regions))
                close = did_you_mean(missing[0], sorted(known))
                raise UnknownRegionError(
                    f"--region {missing[0]}: no such region{close}; the policies define: {names}"
                )
        selection = None if shard is None else select_shard(policies, shard, wanted)
        if selection is not None:
            wanted = selection.regions
        steps = []
        for policy in policies:
            chosen = tuple(r for r in policy.regions if _named(policy, r, wanted))
            if chosen:
                steps.append((policy, chosen))
        return cls(tuple(steps), selection)

    def first(self) -> tuple[tuple[Policy, Region], ...]:
        """The first region to run, with its policy: its worker can start early; () if none."""
        return tuple((policy, regions[0]) for policy, regions in self.steps[:1])
