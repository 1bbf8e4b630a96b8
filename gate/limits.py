"""How much of an input the gate reads at all: each limit, and the one line that refuses a file.

A pull request can change a policy, the stored baseline or a shard's report. Parsing a 50 MB
policy took 248 s and 6.9 GB before it was refused, so a file is measured before it is parsed:
what is over its limit is refused at once, naming its size and the limit. The limits are far
above what real repositories hold (docs/limits.md): a policy names regions, not data.
"""

from __future__ import annotations

import os
from pathlib import Path

from gate.text import size_text

# A policy of 1 MiB holds some 20,000 regions; the largest in real use are a few KiB.
POLICY_BYTES = 1024 * 1024
# The gate's JSON and JUnit documents read back: a stored baseline or a shard's report. A
# baseline is about 4 KiB a region (step times, costs, collectives): 16,000 regions.
DOCUMENT_BYTES = 64 * 1024 * 1024
# Lists and objects within each other; the gate's own documents nest fewer than 10 deep.
DOCUMENT_NESTING = 100
# The profiler's trace of one region's traced runs, every file of its folder: what a worker
# reads back and a run keeps beside its reports. On the CPU the shipped MLP's is under 1 MB,
# a step of 400 unrolled layers' 29 MB (reading it took 5 s and 0.4 GB). A larger one is
# dropped unread, with a note on the region (`gate.witness.op_times`); no verdict uses it.
TRACE_BYTES = 64 * 1024 * 1024


class TooLarge(Exception):
    """A file over its limit: ``size`` bytes (None where the file cannot say, a pipe)."""

    def __init__(self, size: int | None, limit: int) -> None:
        super().__init__(size, limit)
        self.size = size
        self.limit = limit

    def __str__(self) -> str:
        size = "larger" if self.size is None else size_text(self.size)
        limit = size_text(self.limit)
        if size == limit:  # just over: the bytes say by how much
            size, limit = f"{self.size:,} bytes", f"{self.limit:,} bytes"
        return f"{size}, over the limit of {limit}"


def read_within(path: Path, limit: int) -> bytes:
    """The bytes of ``path``; `TooLarge` when it holds more than ``limit``, read no further.

    Raises OSError as reading does. A file that grows while it is read, or one with no size
    (a FIFO, ``/dev/zero``), is stopped at ``limit`` all the same.
    """
    with path.open("rb") as stream:
        size = os.fstat(stream.fileno()).st_size
        if size > limit:
            raise TooLarge(size, limit)
        data = stream.read(limit + 1)
    if len(data) > limit:
        raise TooLarge(size if size > limit else None, limit)
    return data
