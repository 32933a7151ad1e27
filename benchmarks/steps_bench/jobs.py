"""The handlers ``benchmarks/steps.py`` measures; found by the registry's autodiscovery."""

from __future__ import annotations

from django_durable_jobs import JobContext, job


def _nothing() -> None:
    return None


@job("bench.steps")
def steps(ctx: JobContext) -> int:
    """``payload["steps"]`` no-op steps (``s0``, ``s1``, ...): what a step costs."""
    n = int(ctx.payload.get("steps", 0))
    for i in range(n):
        ctx.step(f"s{i}", _nothing)
    return n


@job("bench.nap")
def nap(ctx: JobContext) -> None:
    """``ctx.sleep("nap", payload["seconds"])``: a timed wake-up."""
    ctx.sleep("nap", float(ctx.payload.get("seconds", 1)))


@job("bench.wait")
def wait(ctx: JobContext) -> None:
    """``ctx.wait_for_event(payload["key"])``: a wake-up by an emit."""
    ctx.wait_for_event(ctx.payload["key"])
