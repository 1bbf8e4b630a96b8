"""A run compared with a before: the base tree of ``run --base REF``, or the stored baseline.

The base is checked out in a temporary git worktree (`gate.compare.worktree`); each
region runs from both trees in two workers at once (`gate.compare.session`), both then time
it in paired rounds (`gate.compare.rounds`), and the rounds' ratios are judged
(`gate.compare.stats`, `gate.compare.timing`), as are the outputs and the transfers. Without
a base, step times and XLA's figures are compared with those ``transfer-gate baseline``
stored (`gate.compare.stored_baseline`).
"""
