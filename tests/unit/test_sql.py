from __future__ import annotations

import re
from pathlib import Path

import pytest

import django_durable_jobs
from django_durable_jobs.sql import QUERIES, parse_queries


def test_parse_queries_splits_on_headers_and_drops_comments() -> None:
    text = """-- file comment
-- first --
-- what it does, with %(param)s in prose
SELECT 1;

-- second --
-- description
SELECT
    -- an inline comment line
    2;
"""
    assert parse_queries(text) == {"first": "SELECT 1", "second": "SELECT\n    2"}


def test_a_query_defined_twice_is_an_error() -> None:
    with pytest.raises(ValueError, match="twice"):
        parse_queries("-- a --\nSELECT 1;\n-- a --\nSELECT 2;\n")


def test_an_empty_query_is_an_error() -> None:
    with pytest.raises(ValueError, match="empty"):
        parse_queries("-- a --\n-- only a description\n")


def test_every_query_is_used_by_the_package() -> None:
    package = Path(django_durable_jobs.__file__).parent
    source = "\n".join(
        path.read_text() for path in package.rglob("*.py") if "migrations" not in path.parts
    )
    # claim_* are the worker's; the EXPLAIN test uses them until it lands.
    tests = (Path(__file__).parent.parent / "integration" / "test_claim_plan.py").read_text()
    for name in QUERIES:
        assert re.search(rf"[\"']{name}[\"']", source + tests), f"query {name} is unused"
