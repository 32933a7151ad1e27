"""Scenario: a transaction holds back the vacuum horizon for 60 s while the workers drain.

The issue's scenario: a session elsewhere (a "nightly report", as the
workers' role) opens a ``REPEATABLE READ`` transaction, reads the job table
(its snapshot) and stays ``idle in transaction`` for 60 s, while two
workers drain a backlog; vacuum may remove none of the dead rows their
claims and outcomes leave meanwhile. Prometheus is played by the test: it
scrapes every worker's ``/metrics`` every 5 s, before, during and after the
hold. Then:

- ``DurableJobsVacuumHorizonHeld``, its expression and ``for:`` read from
  ``docs/prometheus-alerts.yml``, evaluated by promtool on the scraped
  ``durable_jobs_db_horizon_age_seconds`` series: not firing before the
  hold, firing at its last scrape, not firing once the metric's cached
  reading (``doctor.HEALTH_CACHE_SECONDS``) is younger than the release;
- ``manage.py jobs doctor``, a process of its own, run once the scrapes
  show the horizon held for ``HEALTH_HORIZON_AGE_SECONDS``: exit 1, and its
  finding names the holder's pid and application name and how to end it;
  a worker's ``/healthz`` names it too;
- the backlog, which outlasts the hold by construction (the jobs' sleep
  bounds the fleet's rate), drains after it; 0 lost, and no job runs twice:
  holding the horizon is no fault of the workers, so nothing may repeat.

Long mode only (``CHAOS=long``): the alert's threshold is 30 s, so a hold
short enough for CI (15 s) could not fire it without changing the rule
under test, and a 60 s hold would add over a minute to lane C.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from django_durable_jobs import doctor
from django_durable_jobs.conf import jobs_settings
from tests.ports import free_port

from .alerts import Scraper, check_alert, first_firing, get, promtool
from .fleet import MANAGE, ROOT, Fleet, wait_until
from .scenario import Database, Mode, chaos_mode, process_env
from .tally import check, count, finished, unfinished
from .workload import drain, enqueue_flow, rng, stop_cleanly

pytestmark = [
    pytest.mark.chaos,
    # Before the fixtures: the short mode need not start a cluster to skip.
    pytest.mark.skipif(
        not chaos_mode().long, reason="long mode only (CHAOS=long): a 60 s hold, see its docstring"
    ),
]

WORKERS = 2
CONCURRENCY = 4
ARGS = ("--concurrency", str(CONCURRENCY), "--lease-seconds", "10", "--poll-interval", "0.5")
#: Each job's sleep: its lower end bounds the fleet's rate at WORKERS * CONCURRENCY / 0.08
#: = 100 jobs/s, so a backlog of that rate times the hold and 30 s more outlasts the hold.
SLEEP = (0.08, 0.1)
HOLD = 60  # seconds: the issue's
SCRAPE = 5  # seconds between scrapes (and promtool's evaluation interval)
APPLICATION = "chaos-nightly-report"
ALERT = "DurableJobsVacuumHorizonHeld"
AGE = "durable_jobs_db_horizon_age_seconds"
DEAD = "durable_jobs_db_dead_tuples"
JOB_TABLE = "durable_jobs_job"


def run_doctor(database: Database) -> tuple[int, dict[str, Any]]:
    """``manage.py jobs doctor --json`` as the workers' role: its exit status and its JSON."""
    result = subprocess.run(
        [sys.executable, str(MANAGE), "jobs", "doctor", "--json"],
        cwd=ROOT,
        env=process_env(database.url),
        capture_output=True,
        text=True,
        timeout=120,
    )
    try:
        return result.returncode, json.loads(result.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"jobs doctor: {result.stdout}\n{result.stderr}") from None


def test_a_held_horizon_fires_the_alert_and_the_backlog_drains(
    database: Database, fleet: Fleet, mode: Mode, tmp_path: Path
) -> None:
    promtool()  # skip (or fail) before any load without it
    random, seed = rng()
    alias = database.alias
    total = math.ceil(WORKERS * CONCURRENCY / SLEEP[0] * (HOLD + 30))
    jobs = enqueue_flow(alias, total, sleep=SLEEP, random_=random)
    started = time.monotonic()
    ports = {}
    for _ in range(WORKERS):
        port = free_port()
        worker = fleet.start(*ARGS, "--metrics-port", str(port), "--metrics-host", "127.0.0.1")
        ports[worker.id] = port
    fleet.wait_up(*fleet.workers)
    wait_until(lambda: finished(alias) > 0, 60, "the first jobs to finish", fleet.tails)

    scraper = Scraper(ports, SCRAPE)
    before = scraper.until(
        lambda: None not in scraper.ticks[-1][1].values(), 60, "every worker's /metrics"
    )

    holder = psycopg.connect(database.url, application_name=APPLICATION, connect_timeout=10)
    holder.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
    try:
        # The snapshot: this transaction may see every row version of now, so vacuum
        # may remove none that dies after it.
        holder.execute(f"SELECT count(*) FROM {JOB_TABLE}").fetchone()  # noqa: S608
        held_at = time.monotonic()
        pid = holder.info.backend_pid
        finished_at_hold = finished(alias)
        first = len(scraper.ticks)

        def horizon_age() -> float:
            return max(scraper.value(-1, i, AGE) or 0.0 for i in ports)

        threshold = float(jobs_settings.HEALTH_HORIZON_AGE_SECONDS)
        named = f"session pid {pid} ({APPLICATION},"
        doctor_run: tuple[int, dict[str, Any]] | None = None
        healthz: list[str] = []
        while time.monotonic() + SCRAPE < held_at + HOLD:
            scraper.tick()
            # Once a scrape shows the horizon held for the doctor's threshold: the doctor,
            # and the workers' /healthz until one names the holder (each caches its reading).
            if doctor_run is None and horizon_age() >= threshold:
                doctor_run = run_doctor(database)
            for port in ports.values() if doctor_run is not None and not healthz else ():
                status, body = get(port, "/healthz")
                if status == 200 and named in body:
                    healthz.append(body)
        last = len(scraper.ticks) - 1
        left_at_release = unfinished(alias)
        time.sleep(max(0.0, held_at + HOLD - time.monotonic()))
    finally:
        holder.rollback()
        holder.close()
    released_at = time.monotonic()
    finished_in_hold = finished(alias) - finished_at_hold
    # A scrape at least one cache lifetime after the release reads the database after it.
    after = scraper.until(
        lambda: scraper.ticks[-1][0] >= released_at + doctor.HEALTH_CACHE_SECONDS,
        60,
        "a reading taken after the release",
    )

    # The doctor named the holder, and said how to end it; so did /healthz.
    assert doctor_run is not None, f"no scrape showed the horizon held for {threshold} s"
    doctor_status, report = doctor_run
    assert doctor_status == 1, report
    oldest = report["horizon"]["oldest_holder"]
    assert (oldest["pid"], oldest["application_name"], oldest["state"]) == (
        pid, APPLICATION, "idle in transaction"), report  # fmt: skip
    findings = [f for f in report["findings"] if f["code"] == "horizon"]
    assert [(f["severity"], f["subject"]) for f in findings] == [("operator", str(pid))], findings
    assert named in findings[0]["text"], findings
    assert f"pg_terminate_backend({pid})" in findings[0]["advice"], findings
    assert healthz, f"no worker's /healthz named {named!r} within the hold"

    # The alert: quiet under load, firing by the end of the hold, quiet after it.
    series = scraper.series(AGE)
    check_alert(ALERT, series, SCRAPE, {before: False, last: True, after: False}, tmp_path)
    fired = first_firing(ALERT, series, SCRAPE, range(first, last + 1), tmp_path)
    assert fired is not None

    # The backlog outlasted the hold, and drains after it.
    assert left_at_release > 0, "the backlog ended within the hold: nothing to drain after it"
    drain(fleet, 600)
    drained_in = time.monotonic() - released_at
    stop_cleanly(fleet)
    dead_before = scraper.peak(DEAD, range(before, before + 1), table=JOB_TABLE)
    dead_in_hold = scraper.peak(DEAD, range(first, last + 1), table=JOB_TABLE)
    tally = count(
        alias, "vacuum-horizon", mode.name, started, jobs=jobs, in_flight=0,
        held_for=f"{HOLD}s", holder_pid=pid,
        alert_fired_after=f"{scraper.ticks[fired][0] - held_at:.0f}s",
        horizon_age_last_scrape=f"{scraper.peak(AGE, range(last, last + 1)):.1f}s",
        dead_tuples_before=f"{dead_before:.0f}", dead_tuples_peak_in_hold=f"{dead_in_hold:.0f}",
        finished_in_hold=finished_in_hold, left_at_release=left_at_release,
        drained_in=f"{drained_in:.0f}s", seed=seed,
    )  # fmt: skip
    check(tally, fleet.tails)
