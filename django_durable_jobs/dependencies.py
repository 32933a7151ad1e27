"""Jobs that wait for others: ``chain``, ``group``, and the parents' results.

``enqueue(..., depends_on=[...])`` is the primitive (``enqueueing``); these
helpers build the common shapes on it in one transaction, so a chain or a
group is stored whole or not at all. A spec is a dict of ``enqueue``'s
arguments, as ``enqueue_many`` takes.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from django.db import connections, transaction

from . import db
from .enqueueing import EnqueueResult, announced, insert_specs, spec_from_item
from .ids import new_job_id
from .models import DependencyKind, JobDependency
from .validation import Defaults, JobSpec

__all__ = ["chain", "group", "parent_results"]


def chain(*specs: Mapping[str, Any], using: str | None = None) -> list[EnqueueResult]:
    """Enqueue ``specs`` so that each runs after the previous one completed.

    Each job depends on the one before it (and on its own ``depends_on``,
    if it has one); the first is pending at once, the others wait. By
    default a job that ends dead or cancelled cancels the rest of the
    chain; a spec with ``on_parent_failure="run"`` runs anyway. One
    transaction: every job or none. Returns one result per spec, in order.
    """
    defaults = Defaults.from_settings()
    parsed = [spec_from_item(i, spec, defaults, name="chain") for i, spec in enumerate(specs)]
    alias = db.database_alias(using)
    names = [f"chain[{index}]" for index in range(len(parsed))]
    if parsed and _linkable(parsed):
        ids = [new_job_id() for _ in parsed]
        linked = [spec if i == 0 else _after(spec, [ids[i - 1]]) for i, spec in enumerate(parsed)]
        return announced(alias, insert_specs(alias, linked, names=names, ids=ids))
    results: list[EnqueueResult] = []
    with transaction.atomic(using=alias):
        for index, spec in enumerate(parsed):
            if results:
                spec = _after(spec, [results[-1].job.pk])
            results.extend(insert_specs(alias, [spec], names=[names[index]]))
    return announced(alias, results)


def group(
    specs: Iterable[Mapping[str, Any]],
    then: Mapping[str, Any] | None = None,
    *,
    using: str | None = None,
) -> list[EnqueueResult]:
    """Enqueue ``specs`` side by side and, with ``then``, a callback after all of them.

    The members run in parallel (each waits only for its own
    ``depends_on``); the callback depends on every member, and reads their
    results in ``ctx.parent_results``. A member that ends dead or
    cancelled cancels the callback, unless its spec has
    ``on_parent_failure="run"``. One transaction: every job or none.
    Returns one result per member, in order, then the callback's.
    """
    defaults = Defaults.from_settings()
    members = [spec_from_item(i, spec, defaults, name="group") for i, spec in enumerate(specs)]
    callback = None if then is None else spec_from_item(None, then, defaults, name="then")
    alias = db.database_alias(using)
    names = [f"group[{index}]" for index in range(len(members))]
    if callback is not None and _linkable([*members, callback]):
        ids = [new_job_id() for _ in range(len(members) + 1)]
        shape = [*members, _after(callback, ids[:-1])]
        return announced(alias, insert_specs(alias, shape, names=[*names, "then"], ids=ids))
    with transaction.atomic(using=alias):
        results = insert_specs(alias, members, names=names) if members else []
        if callback is not None:
            parents = [result.job.pk for result in results]
            results.extend(insert_specs(alias, [_after(callback, parents)], names=["then"]))
    return announced(alias, results)


def _linkable(specs: Sequence[JobSpec]) -> bool:
    """Whether ``specs`` can go in as one statement, naming each other as parents.

    Not with an idempotency key (a row skipped as a replay would leave its
    children's edges pointing nowhere, and the next job must wait for the
    replayed one instead), nor with parents of their own (one that ended
    dead or cancelled would cancel its child at insert, and that child's
    children in the batch would have to be cancelled by another statement).
    Those shapes are inserted spec by spec, in one transaction.
    """
    return all(spec.idempotency_key is None and not spec.parents for spec in specs)


def _after(spec: JobSpec, parents: Sequence[uuid.UUID]) -> JobSpec:
    """``spec`` waiting for ``parents`` too (after its own, without duplicates)."""
    return spec._replace(parents=tuple(dict.fromkeys((*spec.parents, *parents))))


def parent_results(job_id: uuid.UUID, *, using: str | None = None) -> dict[uuid.UUID, Any]:
    """``{parent id: its result}`` for the parents of ``job_id`` (``ctx.parent_results``).

    One query. Called from an event loop's thread (an ``async def``
    handler), the query runs on a thread of its own, since Django refuses
    the ORM there; it blocks the loop for that one query.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _read_parent_results(job_id, using)
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(_read_in_thread, job_id, using).result()


def _read_parent_results(job_id: uuid.UUID, using: str | None) -> dict[uuid.UUID, Any]:
    edges = JobDependency.objects.using(db.database_alias(using)).filter(
        child_id=job_id, kind=DependencyKind.DEPENDS_ON
    )
    return dict(edges.values_list("parent_id", "parent__result"))


def _read_in_thread(job_id: uuid.UUID, using: str | None) -> dict[uuid.UUID, Any]:
    try:
        return _read_parent_results(job_id, using)
    finally:
        connections.close_all()  # this thread's connection: the thread ends now
