"""The operators' admin: find out why jobs died, requeue, cancel, run now.

Two entries: "Jobs" (the whole table) and "Dead jobs" (the dead-letter
queue, a proxy model); then "Queues" (each queue's counts, oldest pending
job and last hour, pause and resume), "Workers", "Schedules" and the
"Audit trail" (every operator action, from every door). All are
built to stay fast on a table of millions of rows (the Queues page by its
own means: ``queue_overview.py``); the job lists so:

- no ``COUNT(*)`` over the table: the paginator counts exactly up to
  10,000 rows and asks the planner for an estimate beyond that;
- every filter, the search and the default order are served by an index;
- the date hierarchy reads ``min``/``max(created_at)`` (two index probes)
  instead of ``SELECT DISTINCT`` over the rows;
- no sortable columns: sorting millions of rows by priority is a full scan.

No field is editable: a job's state changes only through the actions,
which call ``operations.py`` like the REST API and the CLI do.
"""

# Importing the modules registers their ModelAdmins (admin.autodiscover()
# imports this package).
from __future__ import annotations

from . import audit, jobs, queues, schedules, workers

__all__ = ["audit", "jobs", "queues", "schedules", "workers"]
