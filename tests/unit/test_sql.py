from __future__ import annotations

import re
from pathlib import Path

import pytest

import django_durable_jobs
from django_durable_jobs.db.queries import QUERIES, parse_queries


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


def test_a_fragment_stands_in_for_its_include_line_and_is_not_a_query() -> None:
    text = """-- _tail --
-- shared
FROM t
WHERE x;
-- one --
SELECT a
<<_tail>>;
-- two --
SELECT b
    <<_tail>>
ORDER BY b;
"""
    assert parse_queries(text) == {
        "one": "SELECT a\nFROM t\nWHERE x",
        "two": "SELECT b\nFROM t\nWHERE x\nORDER BY b",
    }


def test_an_unknown_fragment_is_an_error() -> None:
    with pytest.raises(ValueError, match="_missing"):
        parse_queries("-- a --\nSELECT 1\n<<_missing>>;\n")


def test_every_query_is_used_by_the_package() -> None:
    package = Path(django_durable_jobs.__file__).parent
    source = "\n".join(
        path.read_text() for path in package.rglob("*.py") if "migrations" not in path.parts
    )
    # The package's code only: a query that only a test runs is dead code.
    for name in QUERIES:
        assert re.search(rf"[\"']{name}[\"']", source), f"query {name} is unused"


def test_a_fragment_may_open_a_with_and_go_on_after_a_comma() -> None:
    text = "-- _ctes --\nWITH a AS (SELECT 1)\n-- q --\n<<_ctes>>,\nb AS (SELECT 2)\nSELECT 3;\n"
    assert parse_queries(text) == {"q": "WITH a AS (SELECT 1),\nb AS (SELECT 2)\nSELECT 3"}


def test_no_query_keeps_an_include_line() -> None:
    assert not [name for name, sql in QUERIES.items() if "<<" in sql]


def test_a_fragment_may_include_another() -> None:
    text = (
        "-- _columns --\na, b\n"
        "-- _ctes --\nWITH input AS (\nSELECT\n<<_columns>>\nFROM t\n)\n"
        "-- q --\n<<_ctes>>,\nmore AS (SELECT 2)\nSELECT 3;\n"
    )
    assert parse_queries(text) == {
        "q": "WITH input AS (\nSELECT\na, b\nFROM t\n),\nmore AS (SELECT 2)\nSELECT 3"
    }


def test_a_fragment_that_includes_itself_is_an_error() -> None:
    text = "-- _a --\nx\n<<_b>>\n-- _b --\ny\n<<_a>>\n-- q --\n<<_a>>;\n"
    with pytest.raises(ValueError, match="includes itself"):
        parse_queries(text)
