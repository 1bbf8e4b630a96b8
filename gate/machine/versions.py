"""Versions and version specifiers (PEP 440) for ``doctor``'s JAX checks, without ``packaging``.

``packaging`` is not a dependency of the gate, and doctor needs only part of it: is this
installed version inside that specifier (``jax>=0.10,<0.11``)? The operators ``==`` (also
``==0.10.*``), ``!=``, ``<``, ``<=``, ``>``, ``>=`` and ``~=``, joined by commas, are
supported with PEP 440's ordering (epochs, pre-, post- and dev-releases); ``===`` is refused
with a `SpecifierError`. An installed pre-release counts as satisfying a specifier it is
inside, as ``pip check`` counts it: doctor judges what is installed, not what to download.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_VERSION = re.compile(
    r"""
    v?
    (?:(?P<epoch>\d+)!)?
    (?P<release>\d+(?:\.\d+)*)
    (?:[-_.]?(?P<pre_l>a|alpha|b|beta|c|rc|pre|preview)[-_.]?(?P<pre_n>\d*))?
    (?:-(?P<post_n1>\d+)|[-_.]?(?P<post_l>post|rev|r)[-_.]?(?P<post_n2>\d*))?
    (?:[-_.]?(?P<dev_l>dev)[-_.]?(?P<dev_n>\d*))?
    (?:\+(?P<local>[a-z0-9]+(?:[-_.][a-z0-9]+)*))?
    """,
    re.VERBOSE | re.IGNORECASE,
)
_PRE_RANK = {"a": 0, "alpha": 0, "b": 1, "beta": 1, "c": 2, "rc": 2, "pre": 2, "preview": 2}
_OPERATOR = re.compile(r"^\s*(===|==|!=|~=|<=|>=|<|>)\s*(\S+)\s*$")


class SpecifierError(ValueError):
    """A version or specifier doctor cannot read; the message says which and why."""


@dataclass(frozen=True, order=False)
class Version:
    """A PEP 440 version; compare with `key`, which leaves out the local label (``+cuda12``)."""

    text: str
    epoch: int
    release: tuple[int, ...]
    pre: tuple[int, int] | None  # (rank of a/b/rc, number)
    post: int | None
    dev: int | None
    local: str | None

    @classmethod
    def parse(cls, text: str) -> Version:
        match = _VERSION.fullmatch(text.strip())
        if match is None:
            raise SpecifierError(f"{text!r} is not a version")
        pre = None
        if match["pre_l"]:
            pre = (_PRE_RANK[match["pre_l"].lower()], int(match["pre_n"] or 0))
        post_n = match["post_n1"] or match["post_n2"]
        post = int(post_n or 0) if (match["post_n1"] or match["post_l"]) else None
        return cls(
            text=text.strip(),
            epoch=int(match["epoch"] or 0),
            release=tuple(int(part) for part in match["release"].split(".")),
            pre=pre,
            post=post,
            dev=int(match["dev_n"] or 0) if match["dev_l"] else None,
            local=match["local"].lower() if match["local"] else None,
        )

    @property
    def key(self) -> tuple[object, ...]:
        """PEP 440's order: 1.0.dev0 < 1.0a1 < 1.0 < 1.0.post1; trailing zeros do not count."""
        release = list(self.release)
        while len(release) > 1 and release[-1] == 0:
            release.pop()
        if self.pre is None and self.post is None and self.dev is not None:
            pre: tuple[int, int] = (-1, 0)  # 1.0.dev0 comes before 1.0a0
        else:
            pre = self.pre if self.pre is not None else (9, 0)
        post = self.post if self.post is not None else -1
        dev = (0, self.dev) if self.dev is not None else (1, 0)
        return (self.epoch, tuple(release), pre, post, dev)

    @property
    def is_prerelease(self) -> bool:
        return self.pre is not None or self.dev is not None

    def starts_with(self, release: tuple[int, ...], epoch: int = 0) -> bool:
        """Whether this version's release begins with ``release`` (padded: 1 is 1.0.0)."""
        padded = self.release + (0,) * (len(release) - len(self.release))
        return self.epoch == epoch and padded[: len(release)] == release


@dataclass(frozen=True)
class Clause:
    """One ``OP VERSION`` of a specifier."""

    operator: str
    version: str  # as written, may end in ".*" for == and !=

    @property
    def epoch(self) -> int:
        return Version.parse(self.version.removesuffix(".*")).epoch

    def admits(self, candidate: Version) -> bool:
        if self.version.endswith(".*"):
            matches = candidate.starts_with(Version.parse(self.version[:-2]).release, self.epoch)
            return matches if self.operator == "==" else not matches
        spec = Version.parse(self.version)
        if self.operator == "~=":
            # ~=0.10.1 is >=0.10.1, ==0.10.*
            return candidate.key >= spec.key and candidate.starts_with(
                spec.release[:-1], spec.epoch
            )
        if self.operator in ("==", "!="):
            # `==1.0` admits 1.0+cuda12; `==1.0+cuda12` only that local version.
            same = candidate.key == spec.key and (
                spec.local is None or candidate.local == spec.local
            )
            return same if self.operator == "==" else not same
        same_release = (candidate.epoch, candidate.key[1]) == (spec.epoch, spec.key[1])
        if self.operator == "<":
            # `<1.0` does not admit 1.0rc1 (PEP 440), unless it names a pre-release itself.
            if same_release and candidate.is_prerelease and not spec.is_prerelease:
                return False
            return candidate.key < spec.key
        if self.operator == ">":
            # `>1.0` does not admit 1.0.post1, unless it names a post-release itself.
            if same_release and candidate.post is not None and spec.post is None:
                return False
            return candidate.key > spec.key
        if self.operator == "<=":
            return candidate.key <= spec.key
        return candidate.key >= spec.key  # ">="


@dataclass(frozen=True)
class Specifier:
    """Comma-joined clauses (``>=0.10,<0.11``) that must all admit a version; none admit all."""

    clauses: tuple[Clause, ...]

    @classmethod
    def parse(cls, text: str) -> Specifier:
        clauses = []
        for part in text.split(","):
            if not part.strip():
                if text.strip():
                    raise SpecifierError("an empty clause between commas")
                continue
            match = _OPERATOR.match(part)
            if match is None:
                raise SpecifierError(
                    f"{part.strip()!r} is not OPERATOR VERSION (==, !=, <, <=, >, >=, ~=; "
                    "e.g. >=0.10,<0.11)"
                )
            operator, version = match.groups()
            if operator == "===":
                raise SpecifierError("'===' is not supported; use '=='")
            wildcard = version.endswith(".*")
            if wildcard and operator not in ("==", "!="):
                raise SpecifierError(f"{part.strip()!r}: '.*' goes only with == or != (==0.10.*)")
            parsed = Version.parse(version[:-2] if wildcard else version)
            if operator == "~=" and len(parsed.release) < 2:
                raise SpecifierError(f"{part.strip()!r}: '~=' needs two numbers or more (~=0.10)")
            clauses.append(Clause(operator, version))
        return cls(tuple(clauses))

    def admits(self, version: str) -> bool:
        """Whether the installed ``version`` is inside every clause."""
        candidate = Version.parse(version)
        return all(clause.admits(candidate) for clause in self.clauses)

    def __str__(self) -> str:
        return ",".join(f"{clause.operator}{clause.version}" for clause in self.clauses)
