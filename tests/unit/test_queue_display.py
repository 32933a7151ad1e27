"""The Queues page's pieces without a database: the chart, counts and ages for people, and
the worker's in-memory outcome counts."""

from __future__ import annotations

import re
import uuid
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

from django_durable_jobs.admin.charts import HEIGHT, throughput_svg
from django_durable_jobs.admin.humanize import describe_age
from django_durable_jobs.db.records import Outcome, QueueMinuteCounts, Transition
from django_durable_jobs.queue_overview import Count, compact
from django_durable_jobs.worker.throughput import QUEUE_STATS_KEEP, OutcomeCounts


def rects(svg: str) -> list[dict[str, float | str]]:
    return [
        {key: float(value) if key != "fill" else value for key, value in attrs}
        for attrs in (
            re.findall(r'(\w+)="([^"]+)"', rect) for rect in re.findall(r"<rect [^>]+/>", svg)
        )
    ]


def test_the_chart_stacks_failed_on_completed_scaled_to_the_busiest_minute() -> None:
    svg = str(throughput_svg([(0, 0), (10, 0), (5, 5), (0, 1)]))
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    assert "<title>Last 4 minutes: 15 completed, 6 failed</title>" in svg
    bars = rects(svg)
    assert [(bar["x"], bar["height"]) for bar in bars] == [
        (2.0, HEIGHT),
        (4.0, HEIGHT / 2),
        (4.0, HEIGHT / 2),
        (6.0, round(HEIGHT / 10)),
    ]
    # Failed bars sit on top of the completed ones, in red.
    assert bars[2]["y"] == 0 and bars[2]["fill"] != bars[1]["fill"]


def test_one_failure_among_thousands_still_shows() -> None:
    (_done, failed) = rects(str(throughput_svg([(10_000, 1)])))
    assert failed["height"] == 1.0


def test_an_empty_hour_is_a_baseline_only() -> None:
    svg = str(throughput_svg([(0, 0)] * 60))
    assert "<rect" not in svg and "<line" in svg and 'width="120"' in svg


def test_counts_and_ages_for_people() -> None:
    assert str(Count(1234)) == "1,234"
    assert str(Count(1234, estimated=True)) == "~1.2k"
    assert [compact(n) for n in (999, 1_000, 12_345, 1_234_567, 25_000_000)] == [
        "999",
        "1k",
        "12k",
        "1.2M",
        "25M",
    ]
    ages = [
        None,
        timedelta(seconds=45),
        timedelta(minutes=12, seconds=5),
        timedelta(hours=3, minutes=20),
        timedelta(days=2, hours=4, minutes=1),
    ]
    assert [describe_age(age) for age in ages] == ["-", "45 s", "12 min", "3 h 20 min", "2 d 4 h"]


def outcome(queue: str, transition: Transition) -> Outcome:
    return Outcome(uuid.uuid4(), uuid.uuid4(), transition, queue=queue)


def test_the_worker_counts_written_outcomes_by_queue_and_minute() -> None:
    clock = [1_800_000_030.0]  # 30 s into a minute
    counts = OutcomeCounts(clock=lambda: clock[0])
    batch = [
        outcome("emails", Transition.COMPLETE),
        outcome("emails", Transition.RETRY),
        outcome("emails", Transition.DEAD),
        outcome("emails", Transition.RELEASE),  # neither
        outcome("emails", Transition.CANCEL),  # neither
        outcome("", Transition.COMPLETE),  # no queue known: not counted
        lost := outcome("emails", Transition.COMPLETE),  # its lease was lost: not written
    ]
    counts.add(batch, {o.job_id for o in batch if o is not lost})
    clock[0] += 60
    counts.add([done := outcome("reports", Transition.COMPLETE)], {done.job_id})
    minute = datetime.fromtimestamp(1_800_000_000, tz=dt_timezone.utc)
    assert counts.take() == [
        QueueMinuteCounts("emails", minute, 1, 2, 1),
        QueueMinuteCounts("reports", minute + timedelta(minutes=1), 1, 0, 0),
    ]
    assert counts.take() == []


def test_counts_put_back_add_up_and_old_minutes_are_dropped() -> None:
    now = 1_800_000_000.0
    counts = OutcomeCounts(clock=lambda: now)
    minute = datetime.fromtimestamp(now, tz=dt_timezone.utc)
    counts.add([done := outcome("q", Transition.COMPLETE)], {done.job_id})
    taken = counts.take()
    counts.add([again := outcome("q", Transition.COMPLETE)], {again.job_id})
    too_old = minute - QUEUE_STATS_KEEP - timedelta(minutes=1)
    counts.put_back([*taken, QueueMinuteCounts("q", too_old, 5, 0, 0)])
    assert counts.take() == [QueueMinuteCounts("q", minute, 2, 0, 0)]
