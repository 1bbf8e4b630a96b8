"""The cookbook's recipes: the transfers people write, each as a leaky step and its fix.

Every module is one recipe; ``cookbook.yaml`` and ``two_devices.yaml`` name a region per
leaky and per fixed step, and ``generate.py`` runs the gate on them to write
``docs/cookbook.md``. A line marked ``# LEAK`` is one the gate must report for the leaky
region; ``tests/test_cookbook.py`` holds the page and the markers to what the gate says.
"""
