"""A handler thread's database connections between jobs, as Django's between requests.

Before each job the thread checks its connections (``close_old_connections``):
one past ``CONN_MAX_AGE`` or broken is closed, so the next job opens a fresh
one. The check is skipped while the thread holds no connection, and must
resume as soon as a handler opens one: each test runs its jobs one after
the other on one thread of its own, as a slot runs them, and reads the
server's process id of each job's connection.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence

import pytest
from django.db import connection, connections

from django_durable_jobs import job
from django_durable_jobs.context import JobContext
from django_durable_jobs.worker.executor import RetryPolicy, execute
from tests.factories import claimed_job

pytestmark = pytest.mark.django_db

#: The server process id of each "tests.backend_pid" job's connection, in order.
PIDS: list[int] = []


@job("tests.backend_pid")
def backend_pid(ctx: JobContext) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        PIDS.append(cursor.fetchone()[0])


@job("tests.no_database")
def no_database(ctx: JobContext) -> None:
    """A handler that never touches the ORM (a webhook, an email through an API)."""


def run_on_one_thread(types: Sequence[str], between: Callable[[], None] | None = None) -> None:
    """Run a job of each type in turn on a new thread, as a slot does; its
    connections closed at the end, as a slot's are."""
    errors: list[BaseException] = []

    def slot() -> None:
        try:
            for type_name in types:
                outcome = execute(claimed_job(type=type_name), "w", RetryPolicy(0.01, 0.05, 0.0))
                assert outcome is not None and outcome.transition.value == "complete", outcome
                if between is not None:
                    between()
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    PIDS.clear()
    thread = threading.Thread(target=slot)
    thread.start()
    thread.join(30)
    assert not thread.is_alive()
    assert not errors, errors


@pytest.fixture
def max_age() -> Iterator[Callable[[int], None]]:
    """Set the default database's CONN_MAX_AGE for the connections threads open next.

    Every thread's connection wrapper shares the alias's settings dict, and
    reads CONN_MAX_AGE when it connects; restored after the test.
    """
    settings = connections["default"].settings_dict
    previous = settings["CONN_MAX_AGE"]

    def set_to(seconds: int) -> None:
        settings["CONN_MAX_AGE"] = seconds

    yield set_to
    settings["CONN_MAX_AGE"] = previous


def test_with_max_age_0_each_job_gets_a_fresh_connection_even_after_jobs_without_one(
    max_age: Callable[[int], None],
) -> None:
    # Jobs without the ORM in between: the check before the first of them
    # finds the connection expired and closes it, and the thread holds none;
    # the checks must still see the connection the next job opens.
    max_age(0)
    run_on_one_thread(
        ["tests.no_database", "tests.backend_pid", "tests.no_database", "tests.no_database",
         "tests.backend_pid", "tests.backend_pid"]
    )  # fmt: skip
    assert len(PIDS) == 3
    assert len(set(PIDS)) == 3, PIDS


def test_with_a_max_age_the_thread_keeps_its_connection_from_job_to_job(
    max_age: Callable[[int], None],
) -> None:
    max_age(600)
    run_on_one_thread(
        ["tests.backend_pid", "tests.no_database", "tests.backend_pid", "tests.backend_pid"]
    )
    assert len(PIDS) == 3
    assert len(set(PIDS)) == 1, PIDS


def test_a_connection_that_saw_an_error_and_is_gone_is_replaced_before_the_next_job(
    max_age: Callable[[int], None],
) -> None:
    max_age(600)

    def break_the_connection() -> None:
        # As when the server ended it and a query of the handler's failed.
        wrapper = connections["default"]
        if wrapper.connection is not None:
            wrapper.connection.close()
            wrapper.errors_occurred = True

    run_on_one_thread(["tests.backend_pid", "tests.backend_pid"], between=break_the_connection)
    assert len(PIDS) == 2
    assert PIDS[0] != PIDS[1]
