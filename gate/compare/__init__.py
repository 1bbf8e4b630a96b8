"""``run --base REF``: the same regions from the base tree, interleaved with the head's, compared.

The base is checked out in a temporary git worktree (`gate.compare.worktree`); each
region runs from both trees in two workers side by side, their timed runs
interleaved in rounds (`gate.compare.session`), and the two samples are judged
(`gate.compare.stats`, `gate.compare.timing`), as are the outputs and the transfers.
"""
