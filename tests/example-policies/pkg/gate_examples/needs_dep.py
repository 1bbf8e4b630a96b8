"""A module whose dependency is not installed (tests expect the error on line 3)."""

import gate_examples_dependency_that_is_not_installed  # noqa: F401


def train_step() -> None:
    pass
