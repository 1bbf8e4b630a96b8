"""The machine a step was timed on: processor, accelerator, and the software that ran it.

Read in the worker (`gate.machine.diagnosis.PlatformInfo.machine`), which knows JAX's
devices; the gate's own process never opens an accelerator. A stored timing keeps it, and a
later run compares timing only on an equal machine: a laptop's times say nothing about a CI
runner's, nor one JAX's (or one gate's timed loop's) about another's.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from gate.documents import Record

Count = Annotated[int, msgspec.Meta(ge=1)]


class Machine(Record, frozen=True, kw_only=True):
    """Where a step's times were measured. Fields are compared all at once: any differs, and
    the two timings are from different machines."""

    processor: str  # the CPU's model name, "AMD EPYC 7B13"; "" where the system does not say
    cores: Count  # the host's logical CPUs
    platform: str  # JAX's backend: "cpu", "gpu", "tpu"
    accelerator: str  # JAX's device kind: "cpu", "NVIDIA H200", "TPU v5 lite"
    devices: Count  # how many of them JAX sees
    jax: str
    jaxlib: str
    cuda_driver: str | None = None  # "12.8": the newest CUDA the NVIDIA driver supports
    cuda_runtime: str | None = None  # the CUDA runtime JAX loaded
    libtpu: str | None = None  # the libtpu distribution's version
    # How JAX ran a computation on the CPU: "inline" on the calling thread, as the gate's
    # workers run it (`gate.isolation.backend`), or "async" on one of XLA's; None on another
    # platform, and in a record made before the gate kept it.
    cpu_dispatch: str | None = None
    transfer_gate: str  # the gate's version: its timed loop may change between versions

    def describe(self) -> str:
        """``Intel Xeon x8 cores, cpu x1 (cpu), jax 0.10.2, jaxlib 0.10.2, CPU dispatch inline,
        transfer-gate 0.1.0``."""
        extras = [
            f"{name} {value}"
            for name, value in (
                ("CUDA driver", self.cuda_driver),
                ("CUDA", self.cuda_runtime),
                ("libtpu", self.libtpu),
                ("CPU dispatch", self.cpu_dispatch),
            )
            if value
        ]
        return ", ".join(
            [
                f"{self.processor or 'unknown processor'} x{self.cores} cores",
                f"{self.platform} x{self.devices} ({self.accelerator})",
                f"jax {self.jax}",
                f"jaxlib {self.jaxlib}",
                *extras,
                f"transfer-gate {self.transfer_gate}",
            ]
        )

    def differences(self, other: Machine) -> list[str]:
        """The fields that differ, by name: what a reader checks first."""
        return [
            field
            for field in self.__struct_fields__
            if getattr(self, field) != getattr(other, field)
        ]
