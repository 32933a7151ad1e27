"""Moved to ``django_durable_jobs.db.records`` (the gateway's rows); kept importable."""

from __future__ import annotations

from ..db.records import ClaimedJob

__all__ = ["ClaimedJob"]
