"""jax-transfer-gate: fail CI on implicit host/device transfers in JAX code."""

__version__ = "0.1.0"
