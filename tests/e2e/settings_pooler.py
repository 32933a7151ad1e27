"""Settings for worker processes whose DATABASE_URL goes through PgBouncer.

The e2e workers' settings, plus what the example project derives from
``DIRECT_DATABASE_URL`` when it is set: the ``direct`` database alias (in
``DATABASES`` already, from the star import) and ``LISTEN_DATABASE``
pointing at it.
"""

from __future__ import annotations

from example_project.settings import DURABLE_JOBS as EXAMPLE_DURABLE_JOBS

from tests.e2e_settings import *  # noqa: F403

if "LISTEN_DATABASE" in EXAMPLE_DURABLE_JOBS:
    DURABLE_JOBS = {
        **DURABLE_JOBS,  # noqa: F405
        "LISTEN_DATABASE": EXAMPLE_DURABLE_JOBS["LISTEN_DATABASE"],
    }
