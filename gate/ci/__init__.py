"""The reusable workflow's steps that decide something, as code (.github/workflows/gate.yml)."""
