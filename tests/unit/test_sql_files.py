"""The gateway's SQL files: one per area of ``db/``, all loaded, the job's insert columns once."""

from __future__ import annotations

import re
from pathlib import Path

from django_durable_jobs.db import queries

DB = Path(queries.__file__).parent


def test_every_sql_file_of_the_gateway_is_loaded() -> None:
    assert sorted(path.name for path in DB.glob("*.sql")) == sorted(queries.SQL_FILES)


def test_each_sql_file_sits_beside_the_module_that_runs_it() -> None:
    for name in queries.SQL_FILES:
        assert (DB / name).with_suffix(".py").exists(), name


def test_every_insert_of_a_job_names_its_columns_through_the_one_fragment() -> None:
    text = "\n".join((DB / name).read_text() for name in queries.SQL_FILES)
    inserts = re.findall(r"INSERT INTO durable_jobs_job(?:_active)? \(\n(.*)\n", text)
    # insert_job, insert_job_keyed, insert_jobs, insert_jobs_unkeyed, with_parents,
    # insert_job_shape.
    assert len(inserts) == 6
    assert {line.strip().rstrip(",") for line in inserts} == {"<<_job_insert_columns>>"}
    # The list itself is written once, in the fragment.
    assert len(re.findall(r"concurrency_key, trace_context", text)) == 1
