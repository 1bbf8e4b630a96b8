"""Example JAX code that the shipped policies in ``policies/`` gate."""
