"""The worker behind ``manage.py runjobworker``.

- ``loop``: the main loop: claim into free slots, wake on NOTIFY or poll.
- ``executor``: run one job's handler and turn what happened into an outcome.
- ``completer``: write outcomes in batches, each fenced by its lease token.
- ``maintenance``: heartbeats for held leases, and the reaper of expired ones.
- ``listener``: the LISTEN connection that wakes an idle worker.
"""

from __future__ import annotations

from .loop import Worker, WorkerConfig

__all__ = ["Worker", "WorkerConfig"]
