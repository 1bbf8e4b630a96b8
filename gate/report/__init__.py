"""Reporters: JUnit, JSON, terminal, GitHub, and merging shard reports."""
