"""The accelerator job's compilation cache, one scope per kind of trust.

``main`` for the default branch's own runs, ``forks`` for a fork's pull request,
``pull-requests`` for the rest (this repository's pull requests and other branches). Entries
are loaded only in their own scope, so main never loads what a pull request's job wrote
(docs/github-actions.md, "The compilation cache").
"""

from __future__ import annotations

from collections.abc import Mapping

from gate.ci.step import env, set_outputs

# Events whose run is a branch's own: main's scope when that branch is the default one.
_BRANCH_EVENTS = ("push", "schedule", "workflow_dispatch")


def cache_scope(
    event: str, ref: str, default_branch: str, head_repository: str, repository: str
) -> str:
    """The scope of a run of ``event`` on ``ref``; ``head_repository``: a pull request's."""
    if event in _BRANCH_EVENTS:
        own = bool(default_branch) and ref == f"refs/heads/{default_branch}"
        return "main" if own else "pull-requests"
    if head_repository and head_repository != repository:
        return "forks"
    return "pull-requests"


def cache_scope_step(environ: Mapping[str, str]) -> int:
    """The step "Decide the cache's scope": its output ``cache-scope``."""
    scope = cache_scope(
        *(
            env(name, environ)
            for name in ("EVENT", "REF", "DEFAULT_BRANCH", "HEAD_REPOSITORY", "REPOSITORY")
        )
    )
    set_outputs(environ, **{"cache-scope": scope})
    return 0
