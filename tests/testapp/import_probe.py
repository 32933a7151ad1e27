"""A module with an import side effect, for the test that no job makes a worker import it.

Nothing imports it: a job's type names it (``tests.testapp.import_probe.run``,
with a payload shaped like a Django task's), and the worker must not import
a module because a job's type names it (``tasks/results.py``,
``resolve_task``). Importing it records that it was imported, as an
attacker's module would do something worse.
"""

from __future__ import annotations

import os

#: Set in the environment of the process that imports this module.
IMPORTED_ENV = "DURABLE_JOBS_IMPORT_PROBE_IMPORTED"

os.environ[IMPORTED_ENV] = "1"


def run() -> None:
    """Not a task: the module only needs a name for a job's type to point at."""
