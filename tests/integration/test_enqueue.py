from __future__ import annotations

import threading
import uuid
from datetime import datetime, timedelta, timezone
from unittest import mock

import pytest
from django.db import transaction
from django.utils import timezone as dj_timezone

from django_durable_jobs import IdempotencyConflict, enqueue, enqueue_many
from django_durable_jobs import db as gateway
from django_durable_jobs.models import Job, JobStatus
from tests.factories import queue_connection

from .helpers import new_connection, run_in_threads, sleeping_worker, wait_for_lock_waiters

pytestmark = pytest.mark.django_db


def test_enqueue_creates_a_pending_job_with_defaults() -> None:
    result = enqueue("tests.thing", {"n": 1})
    assert result.created is True
    stored = Job.objects.get(pk=result.job.pk)
    assert stored.type == "tests.thing"
    assert stored.payload == {"n": 1}
    assert stored.queue == "default"
    assert stored.status == JobStatus.PENDING
    assert (stored.priority, stored.attempts, stored.max_attempts) == (0, 0, 5)
    assert stored.idempotency_key is None
    assert stored.errors == [] and stored.last_error == "" and stored.result is None
    assert stored.lease_holder is None and stored.lease_token is None
    # The returned instance is what the database holds, without a second query.
    for field in ("type", "queue", "payload", "status", "available_at", "created_at"):
        assert getattr(result.job, field) == getattr(stored, field), field


def test_the_returned_job_is_a_saved_instance() -> None:
    job = enqueue("tests.thing").job
    assert job._state.adding is False
    job.priority = 5
    job.save(update_fields=["priority"])
    assert Job.objects.get(pk=job.pk).priority == 5


def test_positional_construction_matches_the_field_order() -> None:
    # _job_from_spec builds Job(*values); a new field must be added there too.
    assert [f.attname for f in Job._meta.concrete_fields] == [
        "id", "type", "queue", "payload", "idempotency_key", "status", "priority",
        "attempts", "max_attempts", "available_at", "created_at", "updated_at",
        "started_at", "completed_at", "last_error", "errors", "result",
        "lease_holder", "lease_expires_at", "lease_token", "timeout", "concurrency_key",
        "cancel_requested_at", "on_parent_failure", "parent_count", "waiting_on",
        "dependent_count", "trace_context", "waiting_for",
    ]  # fmt: skip


def test_delay_and_run_at_use_the_database_clock() -> None:
    with queue_connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        (db_now,) = cursor.fetchone()
    delayed = enqueue("tests.thing", delay=timedelta(minutes=5)).job
    assert delayed.available_at - delayed.created_at == timedelta(minutes=5)
    # Inside the test's transaction now() is the transaction's start.
    assert delayed.created_at == db_now
    at = datetime(2031, 5, 1, 12, 0, tzinfo=timezone.utc)
    assert enqueue("tests.thing", run_at=at).job.available_at == at
    assert enqueue("tests.thing", delay=0.25).job.available_at - db_now == timedelta(
        milliseconds=250
    )


def test_enqueue_many_returns_what_the_database_stored() -> None:
    at = datetime(2031, 5, 1, 12, 0, 0, 123456, tzinfo=timezone.utc)
    results = enqueue_many(
        [
            {"type": "tests.bulk"},
            {"type": "tests.bulk", "delay": 0.123457},
            {"type": "tests.bulk", "delay": timedelta(days=3, microseconds=1)},
            {"type": "tests.bulk", "run_at": at, "idempotency_key": "k-at"},
            {"type": "tests.bulk", "payload": {"ü": ["✓", None]}, "queue": "q.1", "priority": -4},
        ]
    )
    for result in results:
        stored = Job.objects.get(pk=result.job.pk)
        for field in ("type", "queue", "payload", "priority", "max_attempts",
                      "idempotency_key", "status", "available_at", "created_at"):  # fmt: skip
            assert getattr(result.job, field) == getattr(stored, field), field
    assert results[3].job.available_at == at


def test_unicode_and_nested_payloads_round_trip() -> None:
    payload = {"name": "Zoë ✓", "nested": {"list": [1, 2.5, None, True]}, "empty": {}}
    job = enqueue("tests.thing", payload).job
    assert Job.objects.get(pk=job.pk).payload == payload


def test_same_key_and_parameters_is_a_replay() -> None:
    first = enqueue("tests.thing", {"n": 1}, idempotency_key="replay-1")
    second = enqueue("tests.thing", {"n": 1}, idempotency_key="replay-1")
    assert first.created is True
    assert second.created is False
    assert second.job.pk == first.job.pk
    assert Job.objects.filter(idempotency_key="replay-1").count() == 1


def test_a_replay_returns_the_job_in_its_current_state() -> None:
    first = enqueue("tests.thing", {"n": 1}, idempotency_key="replay-2").job
    Job.objects.filter(pk=first.pk).update(status=JobStatus.COMPLETED, result={"ok": True})
    again = enqueue("tests.thing", {"n": 1}, idempotency_key="replay-2")
    assert again.created is False
    assert (again.job.status, again.job.result) == (JobStatus.COMPLETED, {"ok": True})


def test_a_replay_ignores_the_schedule() -> None:
    first = enqueue("tests.thing", idempotency_key="replay-3", delay=10).job
    again = enqueue("tests.thing", idempotency_key="replay-3", delay=99)
    assert again.created is False and again.job.available_at == first.available_at


@pytest.mark.parametrize(
    ("kwargs", "difference"),
    [
        ({"type": "tests.other", "payload": {"n": 1}}, "type"),
        ({"type": "tests.thing", "payload": {"n": 2}}, "payload"),
        ({"type": "tests.thing", "payload": {"n": 1}, "queue": "other"}, "queue"),
        ({"type": "tests.thing", "payload": {"n": 1}, "priority": 3}, "priority"),
        ({"type": "tests.thing", "payload": {"n": 1}, "max_attempts": 2}, "max_attempts"),
    ],
)
def test_same_key_with_other_parameters_is_a_conflict(
    kwargs: dict[str, object], difference: str
) -> None:
    original = enqueue("tests.thing", {"n": 1}, idempotency_key="conflict").job
    with pytest.raises(IdempotencyConflict) as excinfo:
        enqueue(**kwargs, idempotency_key="conflict")  # type: ignore[arg-type]
    assert excinfo.value.differences == [difference]
    assert excinfo.value.existing.pk == original.pk
    assert "conflict" in str(excinfo.value) and difference in str(excinfo.value)
    assert Job.objects.count() == 1


def test_the_returned_payload_is_the_stored_one_not_the_callers_dict() -> None:
    payload = {1: "a", "t": (1, 2)}
    job = enqueue("tests.thing", payload).job
    payload["t"] = "changed"
    assert job.payload == {"1": "a", "t": [1, 2]} == Job.objects.get(pk=job.pk).payload


def test_conflict_lists_differences_in_a_stable_order() -> None:
    enqueue("tests.thing", {"n": 1}, idempotency_key="order")
    with pytest.raises(IdempotencyConflict) as excinfo:
        enqueue("tests.thing", {"n": 2}, idempotency_key="order", priority=9, queue="q")
    assert excinfo.value.differences == ["queue", "payload", "priority"]


def test_payloads_compare_as_stored_json() -> None:
    enqueue("tests.thing", {"a": 1, "b": [1, 2]}, idempotency_key="json-eq")
    assert enqueue("tests.thing", {"b": [1, 2], "a": 1}, idempotency_key="json-eq").created is False
    assert (
        enqueue("tests.thing", {"a": 1.0, "b": [1, 2]}, idempotency_key="json-eq").created is False
    )


def test_jobs_without_keys_are_never_merged() -> None:
    a = enqueue("tests.thing", {"n": 1})
    b = enqueue("tests.thing", {"n": 1})
    assert a.created and b.created and a.job.pk != b.job.pk


def test_enqueue_many_inserts_thousands_in_one_statement() -> None:
    jobs = [{"type": "tests.bulk", "payload": {"i": i}, "priority": i % 3} for i in range(5000)]
    with mock.patch.object(gateway, "_run", wraps=gateway._run) as execute:
        results = enqueue_many(jobs)
    assert execute.call_count == 1
    assert len(results) == 5000 and all(r.created for r in results)
    assert [r.job.payload["i"] for r in results] == list(range(5000))
    assert Job.objects.filter(type="tests.bulk").count() == 5000
    stored = Job.objects.get(pk=results[4321].job.pk)
    assert (stored.payload, stored.priority) == ({"i": 4321}, 4321 % 3)


def test_enqueue_many_honours_keys_in_one_round_trip_when_all_are_new() -> None:
    jobs = [
        {"type": "tests.bulk", "payload": {"i": i}, "idempotency_key": f"b-{i}"}
        for i in range(3000)
    ]
    with mock.patch.object(gateway, "_run", wraps=gateway._run) as execute:
        results = enqueue_many(jobs)
    assert execute.call_count == 1
    assert all(r.created for r in results)


def test_enqueue_many_mixes_new_jobs_and_replays_in_order() -> None:
    existing = enqueue("tests.bulk", {"i": 1}, idempotency_key="mix-1").job
    results = enqueue_many(
        [
            {"type": "tests.bulk", "payload": {"i": 0}, "idempotency_key": "mix-0"},
            {"type": "tests.bulk", "payload": {"i": 1}, "idempotency_key": "mix-1"},
            {"type": "tests.bulk", "payload": {"i": 2}},
            # The same key twice in one batch is one job.
            {"type": "tests.bulk", "payload": {"i": 0}, "idempotency_key": "mix-0"},
        ]
    )
    assert [r.created for r in results] == [True, False, True, False]
    assert results[1].job.pk == existing.pk
    assert results[3].job.pk == results[0].job.pk
    assert Job.objects.filter(type="tests.bulk").count() == 3


def test_enqueue_many_is_all_or_nothing_on_a_conflict() -> None:
    enqueue("tests.bulk", {"i": 1}, idempotency_key="aon")
    with pytest.raises(IdempotencyConflict):
        enqueue_many(
            [
                {"type": "tests.bulk", "payload": {"i": 0}},
                {"type": "tests.bulk", "payload": {"i": 999}, "idempotency_key": "aon"},
            ]
        )
    assert Job.objects.filter(type="tests.bulk").count() == 1


def test_enqueue_many_conflicting_duplicates_in_one_batch() -> None:
    with pytest.raises(IdempotencyConflict):
        enqueue_many(
            [
                {"type": "tests.bulk", "payload": {"i": 0}, "idempotency_key": "dup"},
                {"type": "tests.bulk", "payload": {"i": 1}, "idempotency_key": "dup"},
            ]
        )
    assert not Job.objects.filter(type="tests.bulk").exists()


def test_enqueue_many_accepts_any_iterable() -> None:
    results = enqueue_many({"type": "tests.gen", "payload": {"i": i}} for i in range(3))
    assert len(results) == 3


def test_a_rolled_back_transaction_leaves_no_job() -> None:
    class Boom(Exception):
        pass

    with pytest.raises(Boom), transaction.atomic(using=gateway.database_alias()):
        enqueue("tests.thing", idempotency_key="rolled-back")
        enqueue_many([{"type": "tests.thing"}, {"type": "tests.thing"}])
        raise Boom
    assert not Job.objects.exists()
    # The key is free again.
    assert enqueue("tests.thing", idempotency_key="rolled-back").created is True


def test_an_unknown_type_is_allowed_from_python() -> None:
    assert enqueue("another.codebase.handler").created


def test_database_errors_come_out_as_django_errors() -> None:
    from django.db import DataError

    with (
        mock.patch("django_durable_jobs.validation.validate_priority", lambda v: v),
        pytest.raises(DataError),
        transaction.atomic(using=gateway.database_alias()),
    ):
        enqueue("tests.thing", priority=10**6)


# --- races and transactions: these need real commits --------------------------


@pytest.mark.django_db(transaction=True)
def test_sixteen_concurrent_callers_with_one_key_make_one_job() -> None:
    for round_ in range(5):
        key = f"race-{round_}"
        results = run_in_threads(
            16, lambda i, key=key: enqueue("tests.race", {"same": True}, idempotency_key=key)
        )
        assert sum(r.created for r in results) == 1
        assert len({r.job.pk for r in results}) == 1
        assert Job.objects.filter(idempotency_key=key).count() == 1


@pytest.mark.django_db(transaction=True)
def test_concurrent_enqueue_many_with_overlapping_keys_neither_duplicates_nor_deadlocks() -> None:
    def batch(i: int) -> dict[int, uuid.UUID]:
        # Every thread sends keys 0..199, each thread in another order:
        # rows are inserted in key order, so the batches cannot deadlock.
        order = list(range(200))
        order = order[i * 12 :] + order[: i * 12]
        if i % 2:
            order.reverse()
        items = [
            {"type": "tests.race", "payload": {"k": k}, "idempotency_key": f"o-{k}"} for k in order
        ]
        results = enqueue_many(items)
        return {k: r.job.pk for k, r in zip(order, results, strict=True)}

    results = run_in_threads(16, batch)
    assert all(r == results[0] for r in results)
    assert Job.objects.filter(type="tests.race").count() == 200


@pytest.mark.django_db(transaction=True)
def test_a_second_caller_waits_for_the_first_to_commit() -> None:
    inserted = threading.Event()
    release = threading.Event()

    def first(_: int) -> object:
        with transaction.atomic(using=gateway.database_alias()):
            result = enqueue("tests.wait", {"n": 1}, idempotency_key="wait")
            inserted.set()
            release.wait(10)
        return result

    def second(_: int) -> object:
        inserted.wait(10)
        result = enqueue("tests.wait", {"n": 1}, idempotency_key="wait")
        return result, release.is_set()

    def both(i: int) -> object:
        if i == 0:
            return first(i)
        if i == 1:
            return second(i)
        inserted.wait(10)
        wait_for_lock_waiters(1)  # second is now blocked on the key
        release.set()
        return None

    a, (b, returned_after_the_commit), _ = run_in_threads(3, both)
    assert a.created is True and b.created is False
    assert a.job.pk == b.job.pk
    assert returned_after_the_commit


@pytest.mark.django_db(transaction=True)
def test_a_second_caller_inserts_when_the_first_rolls_back() -> None:
    inserted = threading.Event()

    class Rollback(Exception):
        pass

    def both(i: int) -> object:
        if i == 0:
            try:
                with transaction.atomic(using=gateway.database_alias()):
                    enqueue("tests.wait", {"n": 1}, idempotency_key="rb")
                    inserted.set()
                    wait_for_lock_waiters(1)  # the second caller is blocked on the key
                    raise Rollback
            except Rollback:
                return None
        inserted.wait(10)
        return enqueue("tests.wait", {"n": 1}, idempotency_key="rb")

    _, result = run_in_threads(2, both)
    assert result.created is True
    assert Job.objects.get(idempotency_key="rb").pk == result.job.pk


@pytest.mark.django_db(transaction=True)
def test_notify_is_delivered_only_at_commit() -> None:
    listener = new_connection()
    try:
        with sleeping_worker():
            listener.execute("LISTEN durable_jobs")
            with transaction.atomic(using=gateway.database_alias()):
                enqueue("tests.notify", queue="emails")
                enqueue_many([{"type": "tests.notify", "queue": "reports"}] * 3)
                assert list(listener.notifies(timeout=0.3, stop_after=1)) == []
            heard = list(listener.notifies(timeout=2, stop_after=2))
            assert sorted((n.channel, n.payload) for n in heard) == [
                ("durable_jobs", "emails"),
                ("durable_jobs", "reports"),
            ]
            # A rolled-back enqueue notifies nobody.
            with pytest.raises(RuntimeError), transaction.atomic(using=gateway.database_alias()):
                enqueue("tests.notify", queue="emails")
                raise RuntimeError
            assert list(listener.notifies(timeout=0.3, stop_after=1)) == []
            # Outside a transaction (autocommit) the statement commits at once.
            enqueue("tests.notify", queue="emails")
            assert [n.payload for n in listener.notifies(timeout=2, stop_after=1)] == ["emails"]
            # A replay inserts nothing and notifies nobody.
            enqueue("tests.notify", idempotency_key="n-1")
            list(listener.notifies(timeout=1, stop_after=1))
            enqueue("tests.notify", idempotency_key="n-1")
            assert list(listener.notifies(timeout=0.3, stop_after=1)) == []
    finally:
        listener.close()


@pytest.mark.django_db(transaction=True)
def test_notify_channel_is_a_setting(settings: object) -> None:
    settings.DURABLE_JOBS = {"NOTIFY_CHANNEL": "other_channel"}  # type: ignore[attr-defined]
    listener = new_connection()
    try:
        with sleeping_worker():
            listener.execute("LISTEN other_channel")
            enqueue("tests.notify")
            assert [n.channel for n in listener.notifies(timeout=2, stop_after=1)] == [
                "other_channel"
            ]
    finally:
        listener.close()


def _enqueue_each_way(queue: str) -> None:
    """One job of ``queue`` by each enqueue statement: single, keyed, batch, keyed
    batch, chain (with parents)."""
    enqueue("tests.notify", queue=queue)
    enqueue("tests.notify", queue=queue, idempotency_key=f"{queue}-{uuid.uuid4()}")
    enqueue_many([{"type": "tests.notify", "queue": queue}] * 2)
    enqueue_many([{"type": "tests.notify", "queue": queue, "idempotency_key": str(uuid.uuid4())}])
    parent = enqueue("tests.notify", queue=queue).job
    enqueue("tests.notify", queue=queue, depends_on=[parent])


@pytest.mark.django_db(transaction=True)
def test_enqueues_notify_a_queue_only_while_one_of_its_workers_sleeps() -> None:
    """A worker that is awake claims on its own within milliseconds: no NOTIFY (and no
    commit queueing on PostgreSQL's notify lock) for it; nor with no worker at all."""
    alias = gateway.database_alias()
    listener = new_connection()
    try:
        listener.execute("LISTEN durable_jobs")
        with sleeping_worker("w-emails", ["emails"]):
            # A sleeper of another queue only.
            _enqueue_each_way("reports")
            assert list(listener.notifies(timeout=0.3, stop_after=1)) == []
            _enqueue_each_way("emails")
            assert {n.payload for n in listener.notifies(timeout=2, stop_after=1)} == {"emails"}
            list(listener.notifies(timeout=0.3))  # the rest of them
            # The same worker awake: nobody sleeps.
            gateway.mark_listener(
                alias, "w-emails", ["emails"], sleeping=False, forget_after_seconds=3600
            )
            _enqueue_each_way("emails")
            assert list(listener.notifies(timeout=0.3, stop_after=1)) == []
            # A worker of every queue asleep.
            gateway.mark_listener(alias, "w-all", None, sleeping=True, forget_after_seconds=3600)
            enqueue("tests.notify", queue="reports")
            assert [n.payload for n in listener.notifies(timeout=2, stop_after=1)] == ["reports"]
        # No worker's row at all.
        _enqueue_each_way("emails")
        assert list(listener.notifies(timeout=0.3, stop_after=1)) == []
    finally:
        listener.close()


@pytest.mark.django_db(transaction=True)
def test_a_repeatable_read_enqueue_always_notifies() -> None:
    """Its snapshot is the transaction's, older than a worker's later mark: it cannot
    tell whether a worker went to sleep meanwhile, so it notifies, as before."""
    listener = new_connection()
    try:
        listener.execute("LISTEN durable_jobs")
        with sleeping_worker("w-emails", ["emails"]):
            gateway.mark_listener(
                gateway.database_alias(), "w-emails", ["emails"], sleeping=False,
                forget_after_seconds=3600,
            )  # fmt: skip
            with transaction.atomic(using=gateway.database_alias()):
                queue_connection.cursor().execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                enqueue("tests.notify", queue="emails")
            assert [n.payload for n in listener.notifies(timeout=2, stop_after=1)] == ["emails"]
    finally:
        listener.close()


def test_available_at_uses_aware_datetimes() -> None:
    job = enqueue("tests.thing").job
    assert dj_timezone.is_aware(job.available_at)


# --- found by the property tests (tests/fuzz/test_enqueue_properties.py) ----------


def test_a_payload_float_that_jsonb_reads_back_as_an_int_replays() -> None:
    # jsonb keeps 1.2345678901234567e+30 as the integer it is in decimal; the
    # replay compared that int with the float and raised IdempotencyConflict.
    payload = {"f": 1.2345678901234567e30, "small": 1.5e-7, "n": [1e23]}
    first = enqueue("tests.thing", payload, idempotency_key="floats")
    again = enqueue("tests.thing", payload, idempotency_key="floats")
    assert (first.created, again.created) == (True, False)
    assert again.job.pk == first.job.pk
    assert Job.objects.get(pk=first.job.pk).payload["f"] == 1234567890123456700000000000000
    with pytest.raises(IdempotencyConflict):
        enqueue("tests.thing", {**payload, "f": 1.2345678901234568e30}, idempotency_key="floats")


@pytest.mark.parametrize("many", [False, True], ids=["enqueue", "enqueue_many"])
def test_on_parent_failure_run_without_parents_is_stored_and_replays(many: bool) -> None:
    # The inserts for jobs without parents left the column at 'cancel': the job
    # read back otherwise than it was returned, and its replay was a conflict.
    arguments = {"type": "tests.thing", "idempotency_key": "opf", "on_parent_failure": "run"}
    for created in (True, False):
        result = (
            enqueue_many([arguments, {"type": "tests.other"}])[0] if many else enqueue(**arguments)
        )
        assert result.created is created
        assert result.job.on_parent_failure == "run"
        assert Job.objects.get(pk=result.job.pk).on_parent_failure == "run"
    assert Job.objects.filter(status=JobStatus.PENDING, idempotency_key="opf").count() == 1


@pytest.mark.parametrize(
    "offset",
    [timedelta(hours=20), -timedelta(hours=23), timedelta(seconds=30), timedelta(microseconds=1)],
    ids=["+20:00", "-23:00", "+00:00:30", "+1us"],
)
def test_run_at_in_any_python_offset_is_stored_as_that_instant(offset: timedelta) -> None:
    # PostgreSQL takes offsets up to 15:59, in whole seconds: a DataError before.
    when = datetime(2030, 6, 1, 12, tzinfo=timezone(offset))
    job = enqueue("tests.thing", run_at=when).job
    assert Job.objects.get(pk=job.pk).available_at == when
    assert enqueue_many([{"type": "tests.thing", "run_at": when}])[0].job.available_at == when
