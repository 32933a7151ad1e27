"""Settings of the chaos suite's processes (workers, the web server): the e2e settings, and

- ``DEBUG`` off, as in production (no query log in long runs);
- a fast backoff (from the e2e settings), so retries after a fault come soon;
- ``single``: a queue that runs one job at a time over every worker, for a
  killed worker holding a queue slot (``test_features_under_faults.py``);
- the connection's own ``connect_timeout``, so a connection attempt to a full
  or restarting server fails in seconds instead of hanging.

``DATABASE_URL`` points at the scenario's database on the throwaway cluster.
"""

from __future__ import annotations

from tests.e2e_settings import *  # noqa: F403

DEBUG = False
DURABLE_JOBS = {
    **DURABLE_JOBS,  # noqa: F405
    "QUEUES": {"single": {"concurrency": 1}},
}
DATABASES["default"]["OPTIONS"] = {  # noqa: F405
    **DATABASES["default"].get("OPTIONS", {}),  # noqa: F405
    "connect_timeout": 5,
}
# A 500 of the web server logs its traceback (DEBUG is off): the scenario shows it.
LOGGING["loggers"]["django.request"] = {"handlers": ["console"], "level": "ERROR"}  # noqa: F405
