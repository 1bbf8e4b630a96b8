"""``transfer-gate run --shard K/N``: one matrix job's share of the regions.

Regions are keyed ``suite.region`` and sorted by code point (no locale, no
hash seed), then dealt round-robin: shard K gets the K-th, (K+N)-th, …
key. Every machine makes the same split, every region lands in exactly one
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

from gate.policy.model import Policy

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
                f"over {self.shard.count} shards); writing a report with zero tests"
            )
        return f"shard {self.shard}: running {len(self.regions)} of {self.total} regions"


def select_shard(
    policies: Sequence[Policy], shard: Shard, only: frozenset[str] | None = None
) -> ShardSelection:
    """The regions of `shard`, among those `only` selects (``NAME`` or ``SUITE.NAME``)."""
    keys = sorted(
        {
            f"{policy.suite}.{region.name}"
            for policy in policies
            for region in policy.regions
            if only is None or region.name in only or f"{policy.suite}.{region.name}" in only
        }
    )
    mine = frozenset(keys[shard.index - 1 :: shard.count])
    return ShardSelection(shard, mine, len(keys))
