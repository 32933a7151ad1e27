"""``chain()``'s and ``depends_on``'s statement reads the job table by its primary key.

``insert_jobs_with_parents`` finds the parents (``parent``) and adds to their
``dependent_count`` (``counted``) by id in every partition. The planner
guesses 100 rows per JSON array, so 2,500 edges for any batch: on that guess
it joined the edges with a sequential scan of every partition (seen on the
50,000 rows of ``big_table``). An empty partition read whole costs nothing;
one holding rows must be read through an index.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from django_durable_jobs.db.queries import QUERIES
from tests.factories import queue_connection

from .helpers import explain, relations

pytestmark = pytest.mark.django_db


@pytest.fixture
def big_table(big_table_for_the_module: None) -> None:
    """Every test here reads the same 50,500 rows: written once for the module."""


def row(job_id: uuid.UUID, parents: list[uuid.UUID]) -> list[Any]:
    """A row of insert_jobs_with_parents' document: insert_jobs' eleven columns, then
    on_parent_failure and the parents."""
    return [str(job_id), "tests.record", "default", {}, None, 0, 5, 0, None, None, None,
            "cancel", [str(p) for p in parents]]  # fmt: skip


def seq_scanned_partitions(plan: str) -> set[str]:
    """The partitions of the job table a plan reads with a sequential scan, by name."""

    def walk(node: dict[str, Any]) -> Iterator[str]:
        name = node.get("Relation Name", "")
        if node.get("Node Type") == "Seq Scan" and name.startswith("durable_jobs_job_"):
            yield name
        for child in node.get("Plans", []):
            yield from walk(child)

    return {name for root in json.loads(plan) for name in walk(root["Plan"])}


@pytest.mark.parametrize("parents", ["finished", "running", "in the batch"])
def test_a_chain_reads_no_partition_holding_rows_but_by_index(
    big_table: None, parents: str
) -> None:
    status = {"finished": "completed", "running": "running"}.get(parents, "pending")
    with queue_connection.cursor() as cursor:
        cursor.execute("SELECT id FROM durable_jobs_job WHERE status = %s LIMIT 1", [status])
        (old,) = cursor.fetchone()
    first, second = uuid.uuid4(), uuid.uuid4()
    jobs = [row(first, [] if parents == "in the batch" else [old]), row(second, [first])]
    plan = explain(
        QUERIES["insert_jobs_with_parents"],
        {"jobs": json.dumps(jobs), "channel": "durable_jobs", "trace_context": None},
    )
    read_whole = []
    with queue_connection.cursor() as cursor:
        for name in sorted(seq_scanned_partitions(plan)):
            cursor.execute(f"SELECT EXISTS (SELECT 1 FROM {name})")  # noqa: S608 (a plan's names)
            if cursor.fetchone()[0]:
                read_whole.append(name)
    assert read_whole == [], plan


def test_a_shape_of_new_jobs_reads_no_partition_at_all(big_table: None) -> None:
    # chain() and group() of new jobs (every parent in the batch, no key) go
    # through insert_job_shape: it writes the active partition and the edges
    # and reads nothing, so the table's size cannot weigh on it.
    first, second, third = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    jobs = [row(first, []), row(second, [first]), row(third, [first, second])]
    plan = explain(
        QUERIES["insert_job_shape"],
        {"jobs": json.dumps(jobs), "channel": "durable_jobs", "trace_context": None},
    )
    assert relations(plan) == {"durable_jobs_job_active", "durable_jobs_dependency"}, plan
    assert "Seq Scan" not in plan and "Index" not in plan, plan
