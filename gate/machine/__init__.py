"""The machine the gate runs on: backend diagnosis and `transfer-gate doctor`."""
