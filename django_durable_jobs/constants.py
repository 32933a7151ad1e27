"""Limits and names shared by the model, validation and SQL.

Kept apart from ``models.py`` so that ``from django_durable_jobs import job``
works before the app registry is ready (for example from another app's
``models.py``).
"""

from __future__ import annotations

import re

TYPE_MAX_LENGTH = 255
QUEUE_MAX_LENGTH = 100
IDEMPOTENCY_KEY_MAX_LENGTH = 255
CONCURRENCY_KEY_MAX_LENGTH = 255
#: The most jobs of one type sharing a concurrency key that may run at once.
CONCURRENCY_LIMIT_MAX = 10_000
LEASE_HOLDER_MAX_LENGTH = 255
# Stored in a smallint: wide enough for any scheme, and Django Tasks'
# -100..100 fits inside.
PRIORITY_MIN = -32768
PRIORITY_MAX = 32767
# Stored in an int; far past anything sensible, but bounded so that bad
# input is an error here rather than an overflow in the database.
MAX_ATTEMPTS_LIMIT = 1_000_000

# Letters, digits, "_", "-" and "."; no ",", ":" or spaces, which the
# worker's `--queues emails:4,default` syntax uses as separators. The same
# text is the pattern of queue names in the OpenAPI schema; match it with
# fullmatch(): Python's `$` also matches before a final newline.
QUEUE_NAME_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$"
QUEUE_NAME_RE = re.compile(QUEUE_NAME_PATTERN)
# An event key (emit_event, ctx.wait_for_event): the queue-name characters
# and ":" (keys name things, "signup:42"; a key never goes through the
# worker's --queues syntax), up to EVENT_KEY_MAX_LENGTH characters.
EVENT_KEY_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.:\-]*$"
EVENT_KEY_RE = re.compile(EVENT_KEY_PATTERN)
# A delay longer than this is surely a unit mistake (milliseconds for
# seconds); it also keeps available_at far inside PostgreSQL's range.
MAX_DELAY_SECONDS = 100 * 365 * 24 * 3600
# Finished jobs (completed, dead, cancelled) are NOTIFYed for wait() on a
# channel of their own, NOTIFY_CHANNEL and this suffix: a worker's LISTEN
# connection, on NOTIFY_CHANNEL, is never sent them.
FINISHED_CHANNEL_SUFFIX = "_finished"
# PostgreSQL truncates identifiers, channel names included, at 63 bytes,
# and the finished channel adds its suffix to NOTIFY_CHANNEL.
NOTIFY_CHANNEL_MAX_BYTES = 63 - len(FINISHED_CHANNEL_SUFFIX)
# Each worker probes its LISTEN connection on a channel of its own, this
# prefix and a random token: no other listener is sent its probes.
PROBE_CHANNEL_PREFIX = "durable_jobs_probe_"
# A finished notification's payload: this prefix, then the ids, comma-separated.
FINISHED_NOTIFY_PREFIX = "finished:"
# Ids per finished notification: PostgreSQL refuses a payload of 8,000 bytes
# or more, and the prefix with 200 comma-separated ids makes 7,408 bytes.
FINISHED_NOTIFY_IDS = 200
# A pause or resume is announced on NOTIFY_CHANNEL as this prefix and the
# queue's name: ":" is never in a queue name, so an enqueue's notification
# (the bare queue name) cannot be mistaken for one.
QUEUE_STATE_NOTIFY_PREFIX = "queue_state:"

#: Names of the indexes and constraints; tests and the SQL refer to them.
CLAIM_INDEX = "durable_jobs_claim_idx"
CLAIM_QUEUE_INDEX = "durable_jobs_claim_queue_idx"
LEASE_INDEX = "durable_jobs_lease_idx"
KEY_PENDING_INDEX = "durable_jobs_key_pending_idx"
CLAIM_KEYED_INDEX = "durable_jobs_claim_keyed_idx"
KEY_RUNNING_INDEX = "durable_jobs_key_running_idx"
CREATED_INDEX = "durable_jobs_created_idx"
#: Waiting and dead jobs by status, newest first (the Dead jobs list, the
#: job list filtered by one of these statuses, bulk requeue of dead jobs).
HELD_INDEX = "durable_jobs_held_idx"
FINISHED_INDEX = "durable_jobs_finished_idx"
#: Waiting and dead jobs per queue (the admin's Queues page counts them).
QUEUE_HELD_INDEX = "durable_jobs_queue_held_idx"
#: Extended statistics (most common values of queue and status together), so
#: the planner estimates a queue's count in one status well: the Queues page
#: shows that estimate beyond its exact counts.
QUEUE_STATUS_STATISTICS = "durable_jobs_queue_status_stats"
IDEMPOTENCY_CONSTRAINT = "durable_jobs_idempotency_key_uniq"
DEPENDENCY_UNIQUE = "durable_jobs_dep_uniq"
DEPENDENCY_PARENT_INDEX = "durable_jobs_dep_parent_idx"
AUDIT_JOB_INDEX = "durable_jobs_audit_job_idx"
AUDIT_QUEUE_INDEX = "durable_jobs_audit_queue_idx"
STEP_UNIQUE = "durable_jobs_step_uniq"
EVENT_WAITER_KEY_INDEX = "durable_jobs_waiter_key_idx"
#: A step's name: what the handler passes, plus ``#n`` for a repeat.
STEP_NAME_MAX_LENGTH = 220
#: An event's key (``emit_event``, ``ctx.wait_for_event``): the queue-name rules, longer.
EVENT_KEY_MAX_LENGTH = 200
#: The most parents one job may wait for (``depends_on``).
DEPENDS_ON_MAX = 10_000
# A cancel of a running job is NOTIFYed on the queue's channel with this
# prefix before the job's id. Queue names (the enqueue notifications'
# payload) cannot contain ":", so the two never mix.
CANCEL_NOTIFY_PREFIX = "cancel:"
#: The advisory lock space of event keys (two-int form: this, hashtext(key)).
#: An emit and a job suspending to wait for the same key both take it, in
#: their transactions, before they read or write the key's event: so a wait
#: either finds the event or is woken by its emit, never neither.
EVENT_LOCK_SPACE = 0x444A4556  # "DJEV"
