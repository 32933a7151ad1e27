"""Moved to ``django_durable_jobs.schedules.overview``; this path keeps working."""

from __future__ import annotations

from .schedules.overview import describe, effective_queue, schedule_overview

__all__ = ["describe", "effective_queue", "schedule_overview"]
