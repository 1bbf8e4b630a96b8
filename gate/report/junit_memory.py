"""The testcase a region's device memory gives in the JUnit report, when a step keeps some.

``<region>: device memory``, present only when the live set grew with every run, so a clean
region's report is what it always was. It points at what holds the arrays (a module's
global, a closure, an object's attribute), where the PR tools annotate; at the region's
policy line when nothing of the user's was found holding them. A failure under
``memory: {leaks: fail}``; under ``warn`` it passes and says so in system-out.
"""

from __future__ import annotations

from gate.report.junit_cases import Case, Outcome, declared
from gate.report.memory_text import growth_text, leak_line, leak_place
from gate.results.leaks import LEAK_FIX
from gate.results.records import RegionResult


def memory_cases(region: RegionResult) -> list[Case]:
    """``<region>: device memory`` when the step keeps arrays every run; else none."""
    leak = region.memory.leak if region.memory is not None else None
    if region.error is not None or leak is None:
        return []
    line = leak_line(region, leak)
    lines = [line, growth_text(region) or "", f"fix: {LEAK_FIX}"]
    body = "\n".join(x for x in lines if x) + "\n\n" + declared(region)
    outcome = Outcome("failure", "memory-leak", line, body) if leak.failing else None
    file, number = leak_place(region, leak)
    return [
        Case(f"{region.name}: device memory", region.classname, file, number, None, body, outcome)
    ]
