"""Extension points the core calls; integrations register into them.

The core (enqueue, the worker, the operations) knows nothing of the
integrations built on it: the Django Tasks backend (``tasks/``) registers
its resolver, its listener and its limits here from ``AppConfig.ready()``,
and the immediate mode (``immediate.py``) its enqueue listener. Four hooks:

- a *handler resolver* answers, for a job type no ``@job`` declares, with a
  ``Handler`` that runs it (or ``None``): a Django ``@task`` enqueued by our
  backend;
- a *finished listener* hears of jobs that reached a final state without
  their handler's own return path saying so: cancelled, reaped ``dead``, or
  ``dead`` at the time limit of their last attempt. It is called after the
  state change committed, and must not raise (its errors are logged);
- a *concurrency limits provider* answers ``{type: concurrency_limit}`` for
  types declared elsewhere than ``@job``: a Django task's limit in its
  backend's ``OPTIONS``. The worker reads ``concurrency_limits()`` (these
  merged with the ``@job`` ones) when it starts;
- an *enqueue listener* hears of each call that enqueued (``enqueue``,
  ``enqueue_many``, ``chain``, ``group``), with its results, once the
  call's own atomic block has closed (so ``transaction.on_commit`` there
  waits for the caller's commit). It may raise: its error is the call's.

Registration is idempotent (a function registered twice runs once), so a
``ready()`` that runs twice in tests does no harm.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .enqueueing import EnqueueResult
    from .registry import Handler

logger = logging.getLogger("django_durable_jobs")

HandlerResolver = Callable[[str, Any], "Handler | None"]
FinishedListener = Callable[[Collection[uuid.UUID], str], None]
LimitsProvider = Callable[[], Mapping[str, int]]
EnqueueListener = Callable[["Sequence[EnqueueResult]", str], None]

_resolvers: list[HandlerResolver] = []
_finished_listeners: list[FinishedListener] = []
_limits_providers: list[LimitsProvider] = []
_enqueue_listeners: list[EnqueueListener] = []


def add_handler_resolver(resolver: HandlerResolver) -> None:
    """Ask ``resolver(type, payload)`` for types no ``@job`` declares."""
    if resolver not in _resolvers:
        _resolvers.append(resolver)


def add_finished_listener(listener: FinishedListener) -> None:
    """Tell ``listener(job_ids, alias)`` of jobs finished without their handler."""
    if listener not in _finished_listeners:
        _finished_listeners.append(listener)


def add_concurrency_limits(provider: LimitsProvider) -> None:
    """Ask ``provider()`` for ``{type: concurrency_limit}`` of types no ``@job`` declares."""
    if provider not in _limits_providers:
        _limits_providers.append(provider)


def add_enqueue_listener(listener: EnqueueListener) -> None:
    """Tell ``listener(results, alias)`` of each call that enqueued jobs."""
    if listener not in _enqueue_listeners:
        _enqueue_listeners.append(listener)


def resolve_handler(type_name: str, payload: Any) -> Handler | None:
    """The first registered resolver's handler for ``type_name``, or ``None``."""
    for resolver in _resolvers:
        handler = resolver(type_name, payload)
        if handler is not None:
            return handler
    return None


def jobs_finished(job_ids: Collection[uuid.UUID], alias: str) -> None:
    """Call the finished listeners; never raises (the state change has happened)."""
    if not job_ids:
        return
    for listener in _finished_listeners:
        try:
            listener(job_ids, alias)
        except Exception:
            logger.exception("Finished listener %r failed for %s job(s)", listener, len(job_ids))


def jobs_enqueued(results: Sequence[EnqueueResult], alias: str) -> None:
    """Call the enqueue listeners (none registered: a loop over nothing)."""
    for listener in _enqueue_listeners:
        listener(results, alias)


def concurrency_limits() -> dict[str, int]:
    """``{type: concurrency_limit}``: the providers' merged with the ``@job`` handlers'.

    A type a ``@job`` declares is run by that handler (the executor asks
    the registry before the resolvers), so its ``concurrency_limit`` is the
    one that holds, whatever a provider says. A provider that raises is
    logged and left out: the worker still starts, and says why a limit is
    missing.
    """
    from .handlers import registry

    merged: dict[str, int] = {}
    for provider in _limits_providers:
        try:
            merged.update(provider())
        except Exception:
            logger.exception("Concurrency limits provider %r failed", provider)
    merged.update(registry.concurrency_limits())
    return merged
