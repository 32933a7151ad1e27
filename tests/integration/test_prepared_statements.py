"""The worker's hot statements as prepared statements (``PREPARE_STATEMENTS``, issue 26).

``db._run`` prepares ``db.PREPARED`` (the claim of every queue, the outcomes'
write, the heartbeat, the keyed claim's call, ``chain()``'s insert) on connections
that reach PostgreSQL itself. What a worker gets back must not depend on it, before and after
PostgreSQL switches a prepared statement to its generic plan (after five
runs), and that generic plan must be an index plan on a big table.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from django.test import override_settings
from psycopg import ClientCursor

from django_durable_jobs import chain, db, enqueue_many
from django_durable_jobs.constants import CLAIM_INDEX
from django_durable_jobs.db.queries import QUERIES
from django_durable_jobs.db.records import Outcome, Transition
from django_durable_jobs.models import Job
from tests.factories import queue_connection

from .helpers import seq_scanned

pytestmark = pytest.mark.django_db

#: What tells each prepared statement apart in pg_prepared_statements.
MARKS = {
    "claim_jobs": "queue NOT IN (SELECT unnest(",
    "record_outcomes": "jsonb_array_elements",
    "extend_leases": "FOR NO KEY UPDATE OF job",
    "claim_keyed": "durable_jobs_claim_keyed(",
    "insert_job_shape": "SELECT child_id, parent_id, false FROM edge",
}

#: Enough rounds for PostgreSQL to plan each statement generically (after five).
ROUNDS = 7


def prepared_here() -> dict[str, tuple[int, int]]:
    """The queue's statements prepared on this connection: name -> (generic, custom) plans."""
    with queue_connection.cursor() as cursor:
        cursor.execute("SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements")
        rows = cursor.fetchall()
    found = {}
    for statement, generic, custom in rows:
        for name, mark in MARKS.items():
            if mark in statement:
                found[name] = (generic, custom)
    return found


def one_round(index: int) -> dict[str, Any]:
    """Enqueue, claim keyed and unkeyed jobs, beat, write outcomes (one fenced); what came back."""
    enqueue_many(
        [{"type": "tests.serial", "concurrency_key": f"k{index}-{k}"} for k in (1, 1, 2)]
        + [{"type": "tests.record", "payload": {"round": index}}]
    )
    # A chain not yet due (no claim below takes it): insert_job_shape.
    shape = chain({"type": "tests.record", "delay": 3600}, {"type": "tests.record"})
    keyed = db.claim_keyed(
        db.database_alias(),
        worker_id="w",
        lease_seconds=30,
        limit=8,
        key_limits={"tests.serial": 1},
    )
    plain = db.claim(
        db.database_alias(), worker_id="w", lease_seconds=30, limit=8, keyed_types=["tests.serial"]
    )
    held = {job.id: job.lease_token for job in [*keyed, *plain]}
    stale = {plain[0].id: uuid.uuid4()}  # a lease this worker lost
    extended = db.extend_leases(db.database_alias(), {**held, **stale}, lease_seconds=60)
    ids = sorted([*keyed, *plain], key=lambda job: job.id)
    outcomes = [
        Outcome(ids[0].id, ids[0].lease_token, Transition.COMPLETE, '{"ok": 1}'),
        Outcome(ids[1].id, ids[1].lease_token, Transition.RETRY, delay_us=10**9, last_error="x"),
        Outcome(ids[2].id, ids[2].lease_token, Transition.DEAD, last_error="y"),
        Outcome(plain[0].id, uuid.uuid4(), Transition.COMPLETE),  # fenced: not its token
    ]
    written = db.record_outcomes(db.database_alias(), outcomes, history_limit=20)
    statuses = sorted(Job.objects.filter(id__in=held).values_list("status", flat=True))
    shaped = [
        Job.objects.values_list("status", "parent_count", "dependent_count").get(pk=r.job.pk)
        for r in shape
    ]
    Job.objects.all().delete()  # the next round starts from an empty table
    return {
        "keyed": len(keyed),
        "plain": len(plain),
        "extended": extended == set(held) - set(stale),
        "written": written == {ids[0].id, ids[1].id, ids[2].id},
        "statuses": statuses,
        "shape": shaped,
    }


EXPECTED = {
    "keyed": 2,  # one job of each key: k1's second waits for the first
    "plain": 1,
    "extended": True,
    "written": True,
    "statuses": ["completed", "dead", "pending"],
    "shape": [("pending", 0, 1), ("waiting", 1, 0)],
}


@pytest.mark.parametrize("prepare", [None, True, False])
def test_results_are_the_same_prepared_or_not_before_and_after_the_generic_plan(
    prepare: bool | None,
) -> None:
    with override_settings(DURABLE_JOBS={"PREPARE_STATEMENTS": prepare}):
        results = [one_round(index) for index in range(ROUNDS)]
        prepared = prepared_here()
    assert results == [EXPECTED] * ROUNDS
    if prepare is False:
        assert prepared == {}
    else:
        # None: this test's connection goes straight to PostgreSQL.
        assert set(prepared) == set(MARKS)
        # Each ran once a round, all prepared: every run after the first
        # used the statement PostgreSQL keeps, none was parsed again.
        assert all(sum(plans) == ROUNDS for plans in prepared.values()), prepared


# Whether PostgreSQL then keeps the generic plan (plan_cache_mode auto) is its cost
# model's choice, which follows the table's statistics: CI once saw extend_leases keep
# seven custom plans after other tests had filled and emptied the table. A performance
# property, not a correctness one: benchmarks/planning.py measures it; the tests below
# check that the generic plans, when chosen, read the indexes.


@pytest.fixture
def generic_only() -> None:
    """Generic plans only, for the test's transaction (SET LOCAL)."""
    with queue_connection.cursor() as cursor:
        cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")


def explain_generic(name: str, params: dict[str, Any]) -> str:
    """EXPLAIN of ``name`` PREPAREd with its parameters as $n, executed with ``params``."""
    names: list[str] = []
    sql = QUERIES[name]
    for param in params:
        if f"%({param})s" in sql:
            names.append(param)
            sql = sql.replace(f"%({param})s", f"${len(names)}")
    assert "%(" not in sql, sql
    raw = queue_connection.connection
    values = ClientCursor(raw).mogrify(", ".join(["%s"] * len(names)), [params[n] for n in names])
    with queue_connection.cursor() as cursor:
        cursor.execute(f"PREPARE generic_check AS {sql}")
        try:
            cursor.execute(f"EXPLAIN (VERBOSE, FORMAT JSON) EXECUTE generic_check({values})")
            return json.dumps(cursor.fetchone()[0])
        finally:
            cursor.execute("DEALLOCATE generic_check")


def test_the_generic_plans_use_indexes_on_a_big_table(big_table: None, generic_only: None) -> None:
    rows = db.claim(db.database_alias(), worker_id="w", lease_seconds=30, limit=8)
    ids, tokens = [job.id for job in rows], [job.lease_token for job in rows]
    heartbeat = {"ids": ids, "tokens": tokens, "lease_seconds": 30.0}
    outcomes = db._outcomes_params(
        [Outcome(job, token, Transition.COMPLETE) for job, token in zip(ids, tokens, strict=True)],
        20,
    )
    first, second = uuid.uuid4(), uuid.uuid4()
    # insert_jobs' eleven columns, then on_parent_failure and the parents.
    columns = ["tests.record", "default", {}, None, 0, 5, 0, None, None, None, "cancel"]
    shape = {
        "jobs": json.dumps([[str(first), *columns, []], [str(second), *columns, [str(first)]]]),
        "channel": "durable_jobs",
        "trace_context": None,
    }
    claim = {"worker_id": "w", "lease_seconds": 30.0, "limit": 8}
    for name, params in [
        ("claim_jobs", {**claim, "excluded": [], "keyed_types": []}),
        ("claim_jobs", {**claim, "excluded": ["reports"], "keyed_types": ["tests.serial"]}),
        ("extend_leases", heartbeat),
        ("record_outcomes", outcomes),
        ("insert_job_shape", shape),
    ]:
        plan = explain_generic(name, params)
        assert "$1" in plan or "$2" in plan, plan  # a generic plan indeed
        assert "durable_jobs_job" not in seq_scanned(plan), (name, plan)
        if name == "claim_jobs":
            # In claim order, LIMIT rows at most: never a sort of the backlog.
            assert CLAIM_INDEX in plan, plan


def test_the_claim_s_generic_plan_reads_the_claim_index_on_a_one_queue_backlog(
    generic_only: None,
) -> None:
    """A backlog of one queue and one type, as most projects' is. With the paused queues
    and keyed types as `<> ALL ($n)`, PostgreSQL guessed that no row passes (one distinct
    queue: an unknown one is it) and the generic plan sorted a sequential scan of the
    whole backlog."""
    with queue_connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO durable_jobs_job (id, type, queue, payload, status, priority, attempts,
                max_attempts, available_at, created_at, updated_at, last_error, errors)
            SELECT gen_random_uuid(), 'tests.plan', 'default', '{}', 'pending', 0, 0, 5,
                   now() - interval '1 minute', now(), now(), '', '[]'
            FROM generate_series(1, 20000)
            """
        )
        cursor.execute("ANALYZE durable_jobs_job")
    claim = {"worker_id": "w", "lease_seconds": 30.0, "limit": 8}
    for extra in ({"excluded": [], "keyed_types": []}, {"excluded": ["x"], "keyed_types": ["y"]}):
        plan = explain_generic("claim_jobs", {**claim, **extra})
        assert "$1" in plan, plan  # a generic plan indeed
        assert CLAIM_INDEX in plan, plan
        assert "durable_jobs_job" not in seq_scanned(plan), plan


def test_the_setting_is_checked() -> None:
    from django.core.exceptions import ImproperlyConfigured

    from django_durable_jobs.conf import jobs_settings

    with (
        override_settings(DURABLE_JOBS={"PREPARE_STATEMENTS": "yes"}),
        pytest.raises(ImproperlyConfigured, match="PREPARE_STATEMENTS"),
    ):
        _ = jobs_settings.PREPARE_STATEMENTS
