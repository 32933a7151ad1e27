"""The notification probe's state machine (worker/probe.py), on a fake clock and a fake NOTIFY."""

from __future__ import annotations

import logging

import psycopg
import pytest

from django_durable_jobs import metrics
from django_durable_jobs.constants import PROBE_CHANNEL_PREFIX
from django_durable_jobs.worker.probe import NotificationProbe, probe_channel


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def gauge(listen_database: str) -> float | None:
    """The gauge's sample for ``listen_database`` (not the registry's: its queue depth queries)."""
    for family in metrics.NOTIFICATIONS_OK.collect():
        for sample in family.samples:
            if sample.labels == {"listen_database": listen_database}:
                return float(sample.value)
    return None


@pytest.fixture
def clock() -> Clock:
    return Clock()


def make(clock: Clock, sent: list[str], name: str, alias: str | None = None) -> NotificationProbe:
    """A probe LISTENing on ``name`` (the gauge's label); the job database: ``alias`` or it."""
    return NotificationProbe(
        alias=name if alias is None else alias,
        listen_alias=name,
        poll_interval=2.0,
        send=sent.append,
        channel="probe_test",
        clock=clock,
        interval=120.0,
        timeout=5.0,
    )


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_a_probe_goes_out_when_the_listener_connects_and_then_every_interval(
    clock: Clock,
) -> None:
    sent: list[str] = []
    probe = make(clock, sent, "every")
    probe.tick()
    assert sent == []  # not listening yet: nothing to probe
    probe.listening()
    probe.tick()
    assert sent == ["1"]
    probe.heard("1")
    clock.now += 119
    probe.tick()
    assert sent == ["1"]
    clock.now += 1
    probe.tick()
    assert sent == ["1", "2"]


def test_a_heard_probe_means_arriving_and_sets_the_gauge(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    sent: list[str] = []
    probe = make(clock, sent, "heard")
    assert probe.arriving is None
    assert gauge("heard") is None  # no sample before the first verdict
    probe.listening()
    probe.tick()
    clock.now += 0.01
    probe.heard(sent[-1])
    clock.now += 10
    probe.tick()
    assert probe.arriving is True
    assert gauge("heard") == 1.0
    assert warnings(caplog) == []


def test_a_missed_probe_warns_once_naming_listen_and_listen_database(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    sent: list[str] = []
    probe = make(clock, sent, "missed")
    probe.listening()
    probe.tick()
    clock.now += 4.9
    probe.tick()
    assert probe.arriving is None  # not late yet
    clock.now += 0.1
    probe.tick()
    assert probe.arriving is False
    assert gauge("missed") == 0.0
    (warning,) = warnings(caplog)
    assert "LISTEN" in warning and "LISTEN_DATABASE" in warning
    assert "'missed'" in warning and "polling every 2.0s" in warning
    assert "transaction pooler" in warning
    # The next probes are missed too: no second warning.
    for _ in range(3):
        clock.now += 120
        probe.tick()
        clock.now += 5
        probe.tick()
    assert len(sent) == 4
    assert len(warnings(caplog)) == 1


def test_a_missed_probe_on_listen_database_says_what_it_must_reach(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    sent: list[str] = []
    probe = make(clock, sent, "replica", alias="default")  # LISTEN_DATABASE is set
    probe.listening()
    probe.tick()
    clock.now += 5
    probe.tick()
    (warning,) = warnings(caplog)
    assert "LISTEN_DATABASE'] must reach the same database" in warning
    assert "read replica" in warning


def test_arriving_again_is_logged_once_at_info_and_flips_the_gauge_back(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "django_durable_jobs.worker")
    sent: list[str] = []
    probe = make(clock, sent, "again")
    probe.listening()
    probe.tick()
    clock.now += 5
    probe.tick()
    assert probe.arriving is False
    clock.now += 120
    probe.tick()
    probe.heard(sent[-1])
    probe.heard(sent[-1])
    assert probe.arriving is True
    assert gauge("again") == 1.0
    infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert len(infos) == 1 and "arrive again" in infos[0]


def test_a_reconnect_voids_the_probe_in_flight_and_probes_again(clock: Clock) -> None:
    sent: list[str] = []
    probe = make(clock, sent, "reconnect")
    probe.listening()
    probe.tick()
    clock.now += 1
    probe.not_listening()  # the LISTEN connection dropped
    clock.now += 10
    probe.tick()
    assert probe.arriving is None  # the lost connection is not a lost notification
    assert sent == ["1"]  # and no probe while not listening
    probe.listening()
    probe.tick()
    assert sent == ["1", "2"]


def test_a_probe_that_cannot_be_sent_is_retried_soon_and_proves_nothing(
    clock: Clock,
) -> None:
    calls: list[str] = []

    def send(payload: str) -> None:
        calls.append(payload)
        if len(calls) == 1:
            raise psycopg.OperationalError("connection refused")

    probe = NotificationProbe(
        alias="default", listen_alias="unsent", poll_interval=2.0, send=send,
        channel="probe_test", clock=clock, interval=120.0, timeout=5.0,
    )  # fmt: skip
    probe.listening()
    probe.tick()
    clock.now += 10
    probe.tick()
    assert probe.arriving is None
    assert calls == ["1"]
    clock.now += 5  # PROBE_RETRY_SECONDS after the failure
    probe.tick()
    assert calls == ["1", "2"]


def test_forget_removes_the_gauge(clock: Clock) -> None:
    sent: list[str] = []
    probe = make(clock, sent, "forget")
    probe.listening()
    probe.tick()
    probe.heard("1")
    assert gauge("forget") == 1.0
    probe.forget()
    assert gauge("forget") is None
    probe.forget()  # twice: no error


def test_each_worker_gets_a_channel_of_its_own_within_postgresqls_limit() -> None:
    channels = {probe_channel() for _ in range(100)}
    assert len(channels) == 100
    assert all(c.startswith(PROBE_CHANNEL_PREFIX) and len(c.encode()) <= 63 for c in channels)
