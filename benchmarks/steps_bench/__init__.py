"""Handlers of ``benchmarks/steps.py`` (an app of the benchmark's settings only)."""
