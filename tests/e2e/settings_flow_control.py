"""Worker settings for tests/e2e/test_flow_control.py: the e2e settings plus queue limits.

``narrow`` and ``throttled`` as in the example project; ``single`` runs one
job at a time over every worker, for the killed-worker test.
"""

from __future__ import annotations

from tests.e2e_settings import *  # noqa: F403

DURABLE_JOBS = {
    **DURABLE_JOBS,  # noqa: F405
    "QUEUES": {
        "narrow": {"concurrency": 2},
        "throttled": {"rate_limit": "5/s"},
        "single": {"concurrency": 1},
    },
}
