"""``run --base REF``: the same regions from the base tree, interleaved with the head's, compared.

The base is checked out in a temporary git worktree (`gate.compare.worktree`); each
region runs from both trees in two workers at once (`gate.compare.session`), both then time
it in paired rounds (`gate.compare.rounds`), and the rounds' ratios are judged
(`gate.compare.stats`, `gate.compare.timing`), as are the outputs and the transfers.
"""
