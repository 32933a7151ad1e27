"""What a REST caller may enqueue: which types, into which queues, how urgent, how often.

``enqueue()`` from Python trusts its caller (the project's own code). A
REST caller holding ``add_job`` is someone else: a partner's system, a
front end, a script with a token. Left to choose freely, it could start
the package's own bulk jobs (cancel every pending job), a type meant only
for a schedule, a queue no worker serves or one without the limits of its
own (and a new label on every metric), or a priority that jumps ahead of
everything. The defaults here allow what the project declared:

- types: registered handlers, except the package's own (``durable_jobs.*``,
  never allowed) and those declared with ``schedule=`` (they run on their
  schedule); or exactly ``API_ENQUEUE_TYPES``;
- queues: ``DEFAULT_QUEUE``, the keys of ``QUEUES``, the queues handlers
  declare; or exactly ``API_ENQUEUE_QUEUES``;
- priority up to ``API_MAX_PRIORITY`` (0: no higher than the default),
  attempts up to ``API_MAX_ATTEMPTS``.

The system checks (``durable_jobs.E010``, ``W011``) read the same rules.
"""

from __future__ import annotations

from collections.abc import Iterable

from .conf import jobs_settings
from .handlers import registry
from .names import OWN_TYPE_PREFIX, own_type_message

SETTING = "DURABLE_JOBS"


def _matches(name: str, patterns: Iterable[str]) -> bool:
    for pattern in patterns:
        if pattern.endswith(".*"):
            if name.startswith(pattern[:-1]):
                return True
        elif name == pattern:
            return True
    return False


def type_refusal(name: str) -> str | None:
    """Why REST may not enqueue a job of type ``name``; None if it may."""
    if name.startswith(OWN_TYPE_PREFIX):
        return own_type_message(name)
    handler = registry.get(name)
    if handler is None and not jobs_settings.API_ALLOW_UNREGISTERED_TYPES:
        return (
            f"no handler is registered for job type {name!r} "
            f"({SETTING}['API_ALLOW_UNREGISTERED_TYPES'] is False)."
        )
    listed = jobs_settings.API_ENQUEUE_TYPES
    if listed is not None:
        if not _matches(name, listed):
            return (
                f"job type {name!r} is not one REST callers may enqueue "
                f"({SETTING}['API_ENQUEUE_TYPES'])."
            )
        return None
    if handler is not None and handler.schedule is not None:
        return (
            f"job type {name!r} runs on its schedule; list it in "
            f"{SETTING}['API_ENQUEUE_TYPES'] to let REST callers enqueue it too."
        )
    return None


def declared_queues() -> set[str]:
    """The queues the project declared: the default, ``QUEUES``' keys, handlers' queues."""
    queues = {jobs_settings.DEFAULT_QUEUE, *jobs_settings.QUEUES}
    queues.update(handler.queue for handler in registry if handler.queue)
    return queues


def allowed_queues() -> set[str]:
    listed = jobs_settings.API_ENQUEUE_QUEUES
    return set(listed) if listed is not None else declared_queues()


def queue_refusal(name: str) -> str | None:
    """Why REST may not enqueue into queue ``name``; None if it may."""
    allowed = allowed_queues()
    if name in allowed:
        return None
    which = "API_ENQUEUE_QUEUES" if jobs_settings.API_ENQUEUE_QUEUES is not None else "declared"
    shown = ", ".join(sorted(allowed)[:20]) + (", ..." if len(allowed) > 20 else "")
    if which == "declared":
        return (
            f"queue {name!r} is not declared: REST callers may use {shown} (declare a queue in "
            f"{SETTING}['QUEUES'] or list it in {SETTING}['API_ENQUEUE_QUEUES'])."
        )
    return (
        f"queue {name!r} is not one REST callers may use ({SETTING}['API_ENQUEUE_QUEUES']): "
        f"{shown}."
    )


def priority_refusal(priority: int) -> str | None:
    ceiling = jobs_settings.API_MAX_PRIORITY
    if priority > ceiling:
        return f"must be at most {ceiling} ({SETTING}['API_MAX_PRIORITY'])."
    return None


def attempts_refusal(max_attempts: int) -> str | None:
    ceiling = jobs_settings.API_MAX_ATTEMPTS
    if max_attempts > ceiling:
        return f"must be at most {ceiling} ({SETTING}['API_MAX_ATTEMPTS'])."
    return None
