"""A host's TPU chips shared out among workers (`gate.machine.chips`), on planted device files.

What the tests pin is JAX's own rule for its TPU test suite (its conftest.py): worker n sees
chip n alone (``TPU_VISIBLE_CHIPS=n``) and may load libtpu beside the others
(``ALLOW_MULTIPLE_LIBTPU_LOAD=true``), and there are never more workers than chips.
"""

from __future__ import annotations

import pytest

from gate.machine import devices
from gate.machine.chips import ChipsError, TpuChips, host_chips


def plant(monkeypatch: pytest.MonkeyPatch, files: list[str]) -> None:
    """Device files as a TPU VM has them (doctor's tests plant them the same way)."""

    def glob(pattern: str) -> list[str]:
        prefix = pattern.split("*", 1)[0].split("[", 1)[0]
        return [f for f in files if f.startswith(prefix)]

    monkeypatch.setattr(devices.glob, "glob", glob)


V5E_8 = [f"/dev/accel{i}" for i in range(8)]


def test_a_v5e_8_host_has_eight_chips_one_per_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    plant(monkeypatch, V5E_8)
    chips = host_chips({})
    assert chips.chips == tuple(range(8))
    assert chips.shared_out
    assert [chips.worker_environment(slot)["TPU_VISIBLE_CHIPS"] for slot in range(8)] == [
        str(n) for n in range(8)
    ]
    assert chips.worker_environment(3) == {
        "TPU_VISIBLE_CHIPS": "3",
        "ALLOW_MULTIPLE_LIBTPU_LOAD": "true",
        "TPU_CHIPS_PER_PROCESS_BOUNDS": "1,1,1",
        "TPU_PROCESS_BOUNDS": "1,1,1",
    }


def test_never_more_workers_than_chips(monkeypatch: pytest.MonkeyPatch) -> None:
    plant(monkeypatch, V5E_8[:4])
    chips = host_chips({})
    with pytest.raises(IndexError, match="slot 4 of 4 TPU chips"):
        chips.worker_environment(4)
    with pytest.raises(IndexError):
        chips.worker_environment(-1)


def test_older_tpu_vms_count_their_vfio_groups(monkeypatch: pytest.MonkeyPatch) -> None:
    plant(monkeypatch, ["/dev/vfio/0", "/dev/vfio/1", "/dev/vfio/2", "/dev/vfio/3"])
    assert host_chips({}).chips == (0, 1, 2, 3)


def test_tpu_visible_chips_narrows_what_the_gate_shares_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plant(monkeypatch, V5E_8)
    chips = host_chips({"TPU_VISIBLE_CHIPS": "6, 2,6"})
    assert chips.chips == (6, 2)
    assert chips.worker_environment(0)["TPU_VISIBLE_CHIPS"] == "6"
    assert chips.worker_environment(1)["TPU_VISIBLE_CHIPS"] == "2"


@pytest.mark.parametrize(
    ("visible", "message"),
    [
        ("8", r"names chip 8, but this host has chips 0 to 7"),
        ("0,a", r"is not a list of chip numbers; give them separated by commas, like 0,1"),
        ("", r"is not a list of chip numbers"),
        ("-1", r"is not a list of chip numbers"),
    ],
)
def test_a_visible_chips_typo_is_an_error_not_a_shared_chip(
    monkeypatch: pytest.MonkeyPatch, visible: str, message: str
) -> None:
    plant(monkeypatch, V5E_8)
    with pytest.raises(ChipsError, match=message):
        host_chips({"TPU_VISIBLE_CHIPS": visible})


def test_one_chip_is_not_shared_out(monkeypatch: pytest.MonkeyPatch) -> None:
    # A v5e-1 (the lead's machine): the workers keep their environment, as measured there.
    plant(monkeypatch, ["/dev/accel0"])
    chips = host_chips({})
    assert chips == TpuChips((0,))
    assert not chips.shared_out


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"JAX_PLATFORMS": "cpu"}, ()),
        ({"JAX_PLATFORMS": "cuda,cpu"}, ()),
        ({"JAX_PLATFORMS": "tpu,cpu"}, (0, 1)),
        ({"JAX_PLATFORMS": ""}, (0, 1)),
    ],
)
def test_jax_platforms_without_the_tpu_leaves_no_chip(
    monkeypatch: pytest.MonkeyPatch, environ: dict[str, str], expected: tuple[int, ...]
) -> None:
    plant(monkeypatch, V5E_8[:2])
    assert host_chips(environ).chips == expected


def test_a_host_without_tpu_device_files_has_no_chips(monkeypatch: pytest.MonkeyPatch) -> None:
    plant(monkeypatch, ["/dev/nvidia0"])
    assert host_chips({"TPU_VISIBLE_CHIPS": "0"}).chips == ()
