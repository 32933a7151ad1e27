"""The worker behind ``manage.py runjobworker``.

- ``loop``: the worker's lifecycle: start, the loop (claim into free slots,
  wake on NOTIFY or poll), the hand-off to the slots, shutdown.
- ``claiming``: the claim planner: what to claim next, within the limits,
  keys, pauses and the claim-ahead buffer, and the claims themselves.
- ``handoff``: a slot's thread, and what becomes of each outcome.
- ``executor``: run one job's handler and turn what happened into an outcome.
- ``completer``: write outcomes in batches, each fenced by its lease token.
- ``maintenance``: heartbeats for held leases, and the reaper of expired ones.
- ``listener``: the LISTEN connection that wakes an idle worker.
"""

from __future__ import annotations

from .loop import Worker, WorkerConfig

__all__ = ["Worker", "WorkerConfig"]
