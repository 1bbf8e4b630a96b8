"""The gate's benchmarks: one harness, ``python -m benchmarks NAME [OPTIONS]``.

Each scenario is a module here with a docstring (its first line says what it measures) and
``main(argv)``; `benchmarks.__main__` lists them with the figure each backs in the docs. They
share the regions (`benchmarks.regions`), the floor (`benchmarks.floor`), the worker set-up
(`benchmarks.worker`) and how processes are started (`benchmarks.processes`). A one-off
investigation is not kept here: its findings go to docs/performance-log.md with the commit that
measured them, and git keeps the script.
"""
