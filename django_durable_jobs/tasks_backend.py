"""Old path of ``django_durable_jobs.tasks.backend``, kept so imports of it keep working.

Settings name the backend ``django_durable_jobs.backends.DurableJobsBackend``;
the class lives in ``django_durable_jobs.tasks.backend``. Needs Django >= 6.0.
"""

from __future__ import annotations

from .tasks.backend import (
    E101,
    E101_HINT,
    E102,
    E103,
    E104,
    E105,
    E106,
    OPTION_KEYS,
    DurableJobsBackend,
)

__all__ = [
    "E101",
    "E101_HINT",
    "E102",
    "E103",
    "E104",
    "E105",
    "E106",
    "OPTION_KEYS",
    "DurableJobsBackend",
]
