"""Moved to ``django_durable_jobs.db.queries`` (the gateway owns its SQL); kept importable."""

from __future__ import annotations

from ..db.queries import QUERIES, parse_queries

__all__ = ["QUERIES", "parse_queries"]
