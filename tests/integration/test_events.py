"""Events (``emit_event``): created once, immutable, in the caller's transaction, waking waiters.

Jobs are suspended here as the runtime suspends them (a status, an
``available_at``, ``waiting_for`` and an ``EventWaiter`` row), written with
the ORM: these tests are about the emit side of the protocol.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from django_durable_jobs import EventConflict, InvalidEvent, db, emit_event
from django_durable_jobs.authorization import Actor
from django_durable_jobs.models import AuditEntry, Event, EventWaiter, Job, JobStatus
from tests.factories import make_job, make_operator, user_with

from .helpers import new_connection, run_in_threads

pytestmark = pytest.mark.django_db(transaction=True)


def suspended(key: str, status: str = JobStatus.WAITING, *, queue: str = "default") -> Job:
    """A job suspended in ``ctx.wait_for_event(key)``, as the runtime leaves it."""
    later = timezone.now() + timedelta(hours=1)
    job = make_job(
        queue=queue,
        status=status,
        available_at=later,
        waiting_for={"event": key, "deadline": later.isoformat()},
    )
    EventWaiter.objects.create(job=job, key=key)
    return job


def test_first_emit_creates_the_event_then_the_same_payload_is_a_replay() -> None:
    first = emit_event("order:1", {"paid": True})
    assert first.created is True
    assert first.event.key == "order:1" and first.event.payload == {"paid": True}
    again = emit_event("order:1", {"paid": True})
    assert again.created is False
    assert again.event.payload == {"paid": True}
    assert again.event.created_at == first.event.created_at
    assert Event.objects.get(pk="order:1").payload == {"paid": True}


def test_same_payload_compares_as_json_values() -> None:
    emit_event("k.json", {"a": 1, "b": [1, 2]})
    assert emit_event("k.json", {"b": [1, 2], "a": 1.0}).created is False


def test_no_payload_and_none_are_the_same() -> None:
    assert emit_event("k-none").created is True
    assert emit_event("k-none", None).created is False
    with pytest.raises(EventConflict):
        emit_event("k-none", {})


def test_a_different_payload_conflicts_and_the_first_emit_never_changes() -> None:
    emit_event("signup:7", {"email": "a@example.com"})
    with pytest.raises(EventConflict) as raised:
        emit_event("signup:7", {"email": "b@example.com"})
    assert raised.value.key == "signup:7"
    assert raised.value.existing.payload == {"email": "a@example.com"}
    assert "signup:7" in str(raised.value)
    assert Event.objects.get(pk="signup:7").payload == {"email": "a@example.com"}


@pytest.mark.parametrize(
    "key",
    ["", " ", "a b", "a,b", "-x", ".x", "x" * 201, 7, None, "a\x00b", "é"],
)
def test_bad_keys_are_refused(key: object) -> None:
    with pytest.raises(InvalidEvent) as raised:
        emit_event(key)  # type: ignore[arg-type]
    assert raised.value.field == "key"
    assert isinstance(raised.value, ValueError)
    assert not Event.objects.exists()


def test_a_key_of_200_characters_and_colons_is_fine() -> None:
    assert emit_event("x" * 200).created
    assert emit_event("signup:42.a_b-c").created


@pytest.mark.parametrize("payload", [{1j}, float("nan"), {"a": object()}, "a\x00b"])
def test_a_payload_that_is_not_json_is_refused(payload: object) -> None:
    with pytest.raises(InvalidEvent) as raised:
        emit_event("bad.payload", payload)
    assert raised.value.field == "payload"
    assert not Event.objects.exists()


def test_any_json_value_is_a_payload() -> None:
    for index, payload in enumerate(["text", 3, [1, "a"], True, {"nested": {"x": None}}]):
        assert emit_event(f"any.{index}", payload).event.payload == payload
        assert Event.objects.get(pk=f"any.{index}").payload == payload


def test_emit_wakes_waiting_and_sleeping_waiters_only_of_its_key() -> None:
    waiting = suspended("paid:1")
    pending_later = suspended("paid:1", JobStatus.PENDING)
    other_key = suspended("paid:2")
    running = make_job(status=JobStatus.RUNNING, lease_token="00000000-0000-0000-0000-000000000001")
    EventWaiter.objects.create(job=running, key="paid:1")
    cancelled = make_job(status=JobStatus.CANCELLED)
    EventWaiter.objects.create(job=cancelled, key="paid:1")
    before = timezone.now()

    emit_event("paid:1", {"ok": True})

    for job in (waiting, pending_later):
        row = Job.objects.get(pk=job.pk)
        assert row.status == JobStatus.PENDING
        assert row.available_at <= timezone.now()
        assert row.available_at >= before - timedelta(seconds=5)
        assert row.waiting_for is None
    assert set(EventWaiter.objects.values_list("key", flat=True)) == {"paid:2"}
    assert Job.objects.get(pk=other_key.pk).status == JobStatus.WAITING
    assert Job.objects.get(pk=other_key.pk).waiting_for["event"] == "paid:2"
    row = Job.objects.get(pk=running.pk)
    assert row.status == JobStatus.RUNNING
    assert Job.objects.get(pk=cancelled.pk).status == JobStatus.CANCELLED


def test_a_replayed_emit_wakes_nobody() -> None:
    emit_event("late")
    job = suspended("late")  # suspended wrongly after the event: only the first emit wakes
    assert emit_event("late").created is False
    assert Job.objects.get(pk=job.pk).status == JobStatus.WAITING


def test_emit_notifies_the_woken_jobs_queues_at_commit() -> None:
    suspended("ping", queue="emails")
    suspended("ping", queue="emails")
    suspended("ping", queue="reports")
    listener = new_connection()
    try:
        db.listen(listener, "durable_jobs")
        list(listener.notifies(timeout=0.2))  # nothing pending before
        with transaction.atomic(using=db.database_alias()):
            emit_event("ping")
            assert list(listener.notifies(timeout=0.2)) == []  # not before commit
        payloads = {n.payload for n in listener.notifies(timeout=5, stop_after=2)}
        assert payloads == {"emails", "reports"}
    finally:
        listener.close()


def test_an_emit_rolled_back_leaves_no_event_and_wakes_nothing() -> None:
    job = suspended("rollback")

    class Boom(Exception):
        pass

    with pytest.raises(Boom), transaction.atomic(using=db.database_alias()):
        assert emit_event("rollback", {"x": 1}).created
        raise Boom
    assert not Event.objects.filter(pk="rollback").exists()
    row = Job.objects.get(pk=job.pk)
    assert row.status == JobStatus.WAITING and row.waiting_for == {
        "event": "rollback",
        "deadline": row.waiting_for["deadline"],
    }
    assert EventWaiter.objects.filter(job=job).exists()
    # And a later emit may use another payload: the rolled-back one never was.
    assert emit_event("rollback", {"x": 2}).created


def test_emit_commits_with_the_callers_data() -> None:
    with transaction.atomic(using=db.database_alias()):
        emit_event("with.data", 1)
        make_job()
        assert Event.objects.filter(pk="with.data").exists()
    assert Event.objects.get(pk="with.data").payload == 1


def test_two_threads_emitting_different_payloads_exactly_one_wins() -> None:
    for round_ in range(5):
        key = f"race.{round_}"
        job = suspended(key)

        def emit(index: int, key: str = key) -> object:
            try:
                return emit_event(key, {"by": index}).created
            except EventConflict as exc:
                return exc

        results = run_in_threads(2, emit)
        assert sorted(map(type, results), key=str) == sorted([bool, EventConflict], key=str)
        winner = next(i for i, result in enumerate(results) if result is True)
        assert Event.objects.get(pk=key).payload == {"by": winner}
        assert Job.objects.get(pk=job.pk).status == JobStatus.PENDING


def test_two_threads_emitting_the_same_payload_create_it_once() -> None:
    results = run_in_threads(2, lambda _i: emit_event("same.race", {"v": 1}).created)
    assert sorted(results) == [False, True]


def test_an_actor_is_recorded_and_needs_emit_event() -> None:
    operator = make_operator("ops")
    emit_event("audited", {"v": 1}, actor=Actor(door="rest", name="ops", user=operator))
    entry = AuditEntry.objects.get(action="emit")
    assert entry.door == "rest" and entry.actor == "ops" and entry.details == {"key": "audited"}

    from django.core.exceptions import PermissionDenied

    nobody = user_with("view_job")
    with pytest.raises(PermissionDenied):
        emit_event("refused", actor=Actor(door="rest", name="x", user=nobody))
    assert not Event.objects.filter(pk="refused").exists()
    # The same payload again is no new emit: not recorded again.
    emit_event("audited", {"v": 1}, actor=Actor(door="rest", name="ops", user=operator))
    assert AuditEntry.objects.filter(action="emit").count() == 1


def test_without_an_actor_nothing_is_recorded() -> None:
    emit_event("app.data")
    assert not AuditEntry.objects.exists()
