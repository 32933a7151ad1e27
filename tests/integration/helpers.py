"""Shared tools for tests that talk to the real PostgreSQL."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import psycopg
from django.db import connection, connections

from tests.factories import WAIT_SECONDS, wait_until

T = TypeVar("T")


def new_connection(autocommit: bool = True) -> psycopg.Connection[Any]:
    """A psycopg connection of its own to the test database (outside Django)."""
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    params.pop("prepare_threshold", None)
    return psycopg.connect(**params, autocommit=autocommit)


def run_in_threads(count: int, target: Callable[[int], T], timeout: float = 60) -> list[T]:
    """Run ``target(i)`` in ``count`` threads released together; return results in order.

    Each thread gets its own Django connection, closed when it ends.
    Exceptions are re-raised in the caller.
    """
    barrier = threading.Barrier(count)
    results: list[Any] = [None] * count
    errors: list[BaseException] = []

    def run(index: int) -> None:
        try:
            barrier.wait()
            results[index] = target(index)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
    assert not any(t.is_alive() for t in threads), "threads did not finish"
    if errors:
        raise errors[0]
    return results


def wait_for_lock_waiters(count: int = 1, timeout: float = WAIT_SECONDS) -> None:
    """Until ``count`` sessions on the test database wait on a lock (a row, a key, a transaction).

    The positive event a "the second caller blocks" test needs, instead of
    sleeping and hoping the other thread got there. Asked on a connection
    of its own: inside a transaction PostgreSQL keeps showing the first look.
    """
    with new_connection() as conn:

        def waiting() -> bool:
            (row,) = conn.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND wait_event_type = 'Lock'"
            ).fetchall()
            return bool(row[0] >= count)

        wait_until(waiting, timeout, f"{count} session(s) to wait on a lock")


def seq_scanned(plan: str) -> set[str]:
    """The tables an ``explain()`` plan reads with a sequential scan."""

    def walk(node: dict[str, Any]) -> Iterator[str]:
        if node.get("Node Type") == "Seq Scan":
            yield node["Relation Name"]
        for child in node.get("Plans", []):
            yield from walk(child)

    return {table for root in json.loads(plan) for table in walk(root["Plan"])}
