"""Where an array lies over several devices: the sharding a transfer landed in, in words.

JAX's guard logs one line per destination device, each naming the *global* array and the
destination sharding (`gate.jaxhooks.guard_text` reads it). A `Placement` is what those
lines say about the devices: how many receive a part, into how many parts the array is
split, and the spec that put it there. From it come the number of log lines one transfer
makes (one per device), the bytes that really land (a replicated array lands once per
device, a split one once in all), and the words a reader needs: "replicated to 8 devices,
P()" is the forgotten-to-shard-the-batch signature, "split 8 ways over 8 devices, P('data')"
is a batch sharded on the way in.

One device is no placement at all (None where a record holds one): a single-device run's
records, reports and baseline fingerprints stay exactly what they were.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Placement:
    """How an array is laid out over the devices it is on (or is sent to)."""

    # The spec as JAX wrote it, normalised: "P('data')", "P()", "P('data', 'model')"; for a
    # sharding JAX printed without one (GSPMDSharding), its own text, "{devices=[8,1]<=[8]}".
    spec: str
    # Devices that hold a part; None where JAX did not say (GSPMD's "{replicated}").
    devices: int | None
    # Parts the array is split into: 1 when every device holds all of it (replicated).
    ways: int
    # The mesh's axes and sizes, "'data': 4, 'model': 2", for a NamedSharding; else None.
    mesh: str | None = None

    @property
    def replicated(self) -> bool:
        """Every device holds the whole array."""
        return self.ways == 1

    @property
    def copies(self) -> int | None:
        """How many whole copies land: the devices over the parts (8 for P() on 8 devices)."""
        if self.devices is None:
            return None
        return max(1, self.devices // max(1, self.ways))

    def landed(self, nbytes: int) -> int | None:
        """The bytes that land on the devices when an array of ``nbytes`` moves here."""
        copies = self.copies
        return nbytes * copies if copies is not None else None

    def words(self) -> str:
        """``replicated to 8 devices, P()``; ``split 8 ways over 8 devices, P('data')``."""
        devices = f"{self.devices} devices" if self.devices is not None else "every device"
        if self.replicated:
            where = f"replicated to {devices}"
        elif self.devices is not None and self.ways >= self.devices:
            where = f"split {self.ways} ways over {devices}"
        else:
            copies = f" ({self.copies} copies)" if self.copies else ""
            where = f"split {self.ways} ways over {devices}{copies}"
        return f"{where}, {self.spec}"
