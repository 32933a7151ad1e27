"""What ``doctor.py`` makes of a reading: findings, their severity and advice, the
/healthz lines, the admin's verdict. No database: readings are built by hand."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from django_durable_jobs import doctor
from django_durable_jobs.db.health import HorizonHolder, TableHealth, VacuumSettings

THRESHOLDS = doctor.Thresholds(
    horizon_age_seconds=120,
    dead_tuple_ratio=0.2,
    min_dead_tuples=10_000,
    oldest_pending_seconds=600,
)
SINCE = datetime(2026, 1, 1, tzinfo=timezone.utc)


def session(pid: int = 1234, age: float = 720, **fields: Any) -> HorizonHolder:
    values: dict[str, Any] = {
        "kind": "session",
        "holder": str(pid),
        "pid": pid,
        "application_name": "psql",
        "usename": "bob",
        "client_addr": None,
        "state": "idle in transaction",
        "backend_type": "client backend",
        "since": SINCE,
        "query_start": SINCE,
        "xid_age": 5000,
        "age_seconds": age,
        "catalog_only": False,
    }
    return HorizonHolder(**{**values, **fields})


def slot(
    name: str = "standby1", *, active: bool = False, catalog_only: bool = False
) -> HorizonHolder:
    return HorizonHolder(
        "slot", name, None, None, None, None, "active" if active else "inactive",
        "physical", None, None, 90_000, None, catalog_only,
    )  # fmt: skip


def table(
    name: str = "durable_jobs_job", live: int = 100_000, dead: int = 0, **fields: Any
) -> TableHealth:
    values: dict[str, Any] = {
        "table": name,
        "live": live,
        "dead": dead,
        "last_vacuum": None,
        "vacuum_age_seconds": 3600.0,
        "last_analyze": None,
        "autovacuum_enabled": True,
        "reloptions": None,
    }
    return TableHealth(**{**values, **fields})


def reading(
    holders: list[HorizonHolder] = (),  # type: ignore[assignment]
    tables: list[TableHealth] = (),  # type: ignore[assignment]
    *,
    autovacuum: bool = True,
    hidden: list[int] = (),  # type: ignore[assignment]
    oldest: dict[str, float] | None = None,
    paused: frozenset[str] = frozenset(),
) -> doctor.Reading:
    return doctor.Reading(
        holders=list(holders),
        hidden=list(hidden),
        tables=list(tables) or [table()],
        settings=VacuumSettings(autovacuum, True, 50, 0.2, "1min", 150000, True),
        oldest_pending=oldest,
        paused=paused,
    )


def codes(findings: list[doctor.Finding]) -> list[tuple[str, str, str]]:
    return [(f.severity, f.code, f.subject) for f in findings]


def test_a_healthy_database_needs_no_one() -> None:
    findings = doctor.diagnose(reading(), THRESHOLDS)
    assert findings == [] and not doctor.needs_operator(findings)
    assert doctor.health_notes(reading(), THRESHOLDS) == []


def test_an_idle_in_transaction_session_is_named_with_how_to_end_it() -> None:
    (finding,) = doctor.diagnose(reading([session()]), THRESHOLDS)
    assert codes([finding]) == [("operator", "horizon", "1234")]
    assert finding.text.startswith(
        "session pid 1234 (psql, user bob, idle in transaction) has held a transaction open "
        "for 12 min (5,000 transactions)"
    )
    assert "SELECT pg_terminate_backend(1234);" in finding.advice
    assert "idle_in_transaction_session_timeout" in finding.advice


def test_an_active_query_is_cancelled_first() -> None:
    (finding,) = doctor.diagnose(reading([session(state="active", age=3 * 3600)]), THRESHOLDS)
    assert "3 h" in finding.text
    assert finding.advice.startswith("If it may stop: SELECT pg_cancel_backend(1234);")


def test_a_standbys_feedback_points_at_the_standby() -> None:
    walsender = session(backend_type="walsender", state="active", application_name="replica")
    (finding,) = doctor.diagnose(reading([walsender]), THRESHOLDS)
    assert "standby's walsender pid 1234" in finding.text
    assert "hot_standby_feedback" in finding.advice


def test_a_horizon_younger_than_the_threshold_is_no_finding() -> None:
    assert doctor.diagnose(reading([session(age=119)]), THRESHOLDS) == []


def test_an_inactive_slot_needs_dropping_an_active_one_is_information() -> None:
    findings = doctor.diagnose(reading([slot(), slot("live", active=True)]), THRESHOLDS)
    assert codes(findings) == [("operator", "slot", "standby1"), ("info", "slot", "live")]
    assert "SELECT pg_drop_replication_slot('standby1');" in findings[0].advice
    assert "90,000 transactions" in findings[0].text


def test_a_slots_catalog_xmin_does_not_hold_the_job_tables() -> None:
    held = reading([slot("logical", catalog_only=True)])
    (finding,) = doctor.diagnose(held, THRESHOLDS)
    assert (finding.severity, finding.code) == ("info", "slot")
    assert doctor.horizon_xid_age(held) == 0 and doctor.horizon_age_seconds(held) == 0


def test_a_prepared_transaction_is_committed_or_rolled_back_by_gid() -> None:
    prepared = HorizonHolder(
        "prepared",
        "tx-42",
        None,
        None,
        "bob",
        None,
        "prepared",
        None,
        SINCE,
        None,
        10,
        900.0,
        False,
    )
    (finding,) = doctor.diagnose(reading([prepared]), THRESHOLDS)
    assert codes([finding]) == [("operator", "prepared", "tx-42")]
    assert "COMMIT PREPARED 'tx-42';" in finding.advice
    assert "ROLLBACK PREPARED 'tx-42';" in finding.advice


def test_dead_tuples_are_high_past_both_thresholds_only() -> None:
    tables = [
        table("durable_jobs_job", live=100_000, dead=50_000),  # 33 %, 50,000: high
        table("durable_jobs_step", live=10, dead=5_000),  # 99 % but 5,000: not
        table("durable_jobs_audit", live=10_000_000, dead=20_000),  # 20,000 but 0.2 %: not
    ]
    (finding,) = doctor.diagnose(reading(tables=tables), THRESHOLDS)
    assert codes([finding]) == [("operator", "dead_tuples", "durable_jobs_job")]
    assert "33% of its tuples are dead (50,000 dead, 100,000 live)" in finding.text
    # Autovacuum's trigger for this table: 50 + 0.2 x 100,000.
    assert "= 20,050 here" in finding.advice
    assert "autovacuum_vacuum_scale_factor = 0.01" in finding.advice


def test_dead_tuples_under_a_held_horizon_blame_the_horizon() -> None:
    held = reading([session()], [table(dead=50_000)])
    findings = doctor.diagnose(held, THRESHOLDS)
    assert codes(findings) == [
        ("operator", "horizon", "1234"),
        ("operator", "dead_tuples", "durable_jobs_job"),
    ]
    assert findings[1].advice.startswith("The held horizon above is the likely cause")
    assert doctor.horizon_slows_queue(held, THRESHOLDS)
    assert not doctor.horizon_slows_queue(reading([session()]), THRESHOLDS)
    assert not doctor.horizon_slows_queue(reading(tables=[table(dead=50_000)]), THRESHOLDS)


def test_autovacuum_off_is_information_until_dead_tuples_pile_up() -> None:
    (finding,) = doctor.diagnose(reading(autovacuum=False), THRESHOLDS)
    assert (finding.severity, finding.code) == ("info", "autovacuum")
    (finding,) = doctor.diagnose(reading(tables=[table(dead=50_000)], autovacuum=False), THRESHOLDS)
    assert finding.code == "dead_tuples" and "autovacuum is off on this server" in finding.advice
    off = table(dead=50_000, autovacuum_enabled=False, reloptions="autovacuum_enabled=false")
    (finding,) = doctor.diagnose(reading(tables=[off]), THRESHOLDS)
    assert "ALTER TABLE durable_jobs_job RESET (autovacuum_enabled);" in finding.advice


def test_hidden_sessions_say_which_grant_shows_them() -> None:
    (finding,) = doctor.diagnose(reading(hidden=[7, 8]), THRESHOLDS)
    assert codes([finding]) == [("info", "hidden_sessions", "")]
    assert "2 session(s) of other roles (pid 7, 8)" in finding.text


def test_an_old_pending_job_needs_an_operator_unless_its_queue_is_paused() -> None:
    old = {"emails": 900.0, "reports": 30.0, "parked": 9000.0}
    findings = doctor.diagnose(reading(oldest=old, paused=frozenset({"parked"})), THRESHOLDS)
    assert codes(findings) == [("operator", "oldest_pending", "emails")]
    assert "15 min" in findings[0].text


def test_healthz_lines_name_the_holder_and_the_tables() -> None:
    held = reading([session(), slot()], [table(dead=50_000)])
    assert doctor.health_notes(held, THRESHOLDS) == [
        "vacuum horizon: held for 12 min by session pid 1234 (psql, user bob, idle in "
        "transaction) (see manage.py jobs doctor)",
        "vacuum horizon: held 90,000 transactions back by inactive replication slot "
        "'standby1' (see manage.py jobs doctor)",
        "dead tuples: durable_jobs_job 33% dead (50,000), last vacuumed 1 h ago",
    ]


def test_as_dict_is_json_ready() -> None:
    import json

    held = reading([session()], [table(dead=50_000)])
    data = doctor.as_dict(held, doctor.diagnose(held, THRESHOLDS))
    assert json.loads(json.dumps(data)) == data
    assert data["needs_operator"] is True
    assert data["horizon"]["oldest_holder"]["pid"] == 1234
    assert data["horizon"]["age_seconds"] == 720


def test_describe_seconds() -> None:
    assert [doctor.describe_seconds(s) for s in (0.25, 45, 720, 3 * 3600 + 300, 2 * 86400)] == [
        "0.2 s",
        "45 s",
        "12 min",
        "3 h 5 min",
        "2 d",
    ]
    assert doctor.describe_seconds(None) == "never"
