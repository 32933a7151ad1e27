"""How many runnable jobs flow control holds back right now, per queue.

An operator's "why does nothing run?", answered by ``jobs stats``,
``GET /api/jobs/stats``, ``GET /api/queues`` and the admin's Queues page.
A runnable ``pending`` job is held back when no worker may claim it now:

- ``paused``: its queue is paused;
- ``concurrency``: its queue already runs its ``concurrency`` (jobs running
  on a live lease, as the claim counts them);
- ``rate_limit``: its queue's rate window is full (as many starts in the
  last window as the limit allows);
- ``key``: its (type, ``concurrency_key``) already runs its type's
  ``concurrency_limit`` (those this process knows: ``hooks.concurrency_limits()``, the
  ``@job`` limits and the Django Tasks backends' ``concurrency_limits``).

The reasons are those of ``durable_jobs_throttled_total``. Each job counts
once, under the first reason that applies in that order, the claim's: a
paused queue is not claimed at all, and a full queue's keys are not looked
at. A limit with room holds nothing back, even with more jobs waiting than
its room: a worker takes the room at once, and then the limit is full.

Cheap on a big table: at most four small queries (running jobs of the
queues with a ``concurrency``, the throttle rows of the rate-limited ones,
the runnable jobs of the queues found held, the keyed jobs through their
partial indexes), none reading the finished history, and none at all when
nothing is paused or limited.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from django.db.models import Count
from django.db.models.functions import Now

from . import db, hooks
from .flow import QUEUE_LIMIT_REASONS, FlowCounts, QueueLimits, queue_limits, room
from .models import Job, QueueState

#: ``flow.THROTTLE_REASONS``, in the order a job is counted under the first that applies.
HELD_BACK_REASONS = ("paused", *QUEUE_LIMIT_REASONS, "key")


def nothing_held() -> dict[str, int]:
    """``{reason: 0}`` for every reason: a queue whose limits hold no job back."""
    return dict.fromkeys(HELD_BACK_REASONS, 0)


def describe_held_back(held: Mapping[str, int]) -> str:
    """``held_back()``'s counts of one queue as text for people (the CLI, the admin):
    ``"12 (concurrency)"``; ``""`` when none."""
    return ", ".join(f"{count} ({reason})" for reason, count in held.items() if count)


def held_back(using: str, paused: Collection[str] | None = None) -> dict[str, dict[str, int]]:
    """``{queue: {reason: jobs}}`` for the queues holding runnable jobs back now.

    ``paused``: the queues paused now, when the caller has read them already
    (None: read here). A queue missing from the answer holds nothing back
    (``nothing_held()``).
    """
    if paused is None:
        paused = set(QueueState.objects.using(using).paused().values_list("name", flat=True))
    limits = {name: q for name, q in queue_limits().items() if name not in paused}
    reasons = dict.fromkeys(paused, "paused") | _full_queues(using, limits)
    held: dict[str, dict[str, int]] = {}
    if reasons:
        runnable = (
            Job.objects.using(using)
            .runnable()
            .filter(queue__in=reasons)
            .order_by()
            .values_list("queue")
            .annotate(n=Count("*"))
        )
        for queue, count in runnable:
            held.setdefault(queue, nothing_held())[reasons[queue]] = count
    key_limits = hooks.concurrency_limits()
    if key_limits:
        for queue, count in db.jobs_held_by_keys(using, key_limits).items():
            if queue not in reasons:  # already counted, whole, under its queue's reason
                held.setdefault(queue, nothing_held())["key"] = count
    return held


def _full_queues(using: str, limits: Mapping[str, QueueLimits]) -> dict[str, str]:
    """``{queue: "concurrency" or "rate_limit"}`` for the queues whose limit is full now.

    Full: ``flow.room()``, the claim's own rule, lets no job start. The rate
    windows are read only for the queues their running jobs do not fill
    already (those are held by their concurrency, as in the claim).
    """
    capped = [name for name, q in limits.items() if q.concurrency is not None]
    running: dict[str, int] = {}
    if capped:
        running = dict(
            Job.objects.using(using)
            .running()
            .filter(queue__in=capped, lease_expires_at__gt=Now())
            .order_by()
            .values_list("queue")
            .annotate(n=Count("*"))
        )
    counts = {name: FlowCounts(running=running.get(name, 0)) for name in limits}
    full = {
        name: held_by
        for name, q in limits.items()
        if (held_by := room(q, counts[name], 1).held_by) is not None
    }
    windows = {
        name: q.rate_limit.seconds
        for name, q in limits.items()
        if q.rate_limit is not None and name not in full
    }
    if windows:
        starts = db.rate_window_starts(using, windows)
        for name in windows:
            state = FlowCounts(running=counts[name].running, recent_starts=starts.get(name, 0))
            held_by = room(limits[name], state, 1).held_by
            if held_by is not None:
                full[name] = held_by
    return full
