"""Importable helpers for the example policies in tests/example-policies/.

Plain Python and no JAX import, so resolving them keeps the policy tests fast.
"""
