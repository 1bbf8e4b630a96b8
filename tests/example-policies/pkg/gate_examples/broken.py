"""A module that raises while it is imported (tests expect the error on line 5)."""

SETTINGS: dict[str, float] = {}

learning_rate = SETTINGS["learning_rate"]


def train_step() -> None:
    pass
