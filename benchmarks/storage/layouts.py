"""The storage layouts compared for issues 26 and 27, and what the benchmarks share.

Each layout is a database of its own, ``<base>_<layout>``, copied from a
migrated template database (``<base>``, today's schema from the package's
migrations), then given the layout's tables. The statements are the
package's own (``django_durable_jobs/db/*.sql``, through ``QUERIES``), on
another table where the layout has one; layout B's completion, which has no
counterpart in the package, is in ``layout_b.sql``.

- ``A``: today's job table and statements, completion in batches of 10 (the
  claim's batch).
- ``C``: the same table and statements, completion batched across claims
  (100 outcomes a statement, what a completer flushing every 50 ms sends at a
  few thousand jobs/s).
- ``B``: a hot table for the jobs in flight (the claim's, the lease's and flow
  control's indexes, no listing index), completion DELETEs the hot row and
  INSERTs it into a plain history table with the admin's indexes.
- ``BP``: B with the history partitioned by ``completed_at``, one partition a day.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path[:0] = [str(ROOT), str(HERE.parent)]

from django_durable_jobs.db import queries as package_queries  # noqa: E402
from django_durable_jobs.db.queries import QUERIES  # noqa: E402

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/h_storage"


def _b_queries() -> dict[str, str]:
    """layout_b.sql's sections, parsed with the package's files (for their fragments)."""
    package = "\n".join(package_queries._read(name) for name in package_queries.SQL_FILES)
    ours = (HERE / "layout_b.sql").read_text()
    parsed = package_queries.parse_queries(package + "\n" + ours)
    return {name: sql for name, sql in parsed.items() if name.startswith("b_")}


B = _b_queries()


def on_table(query: str, table: str) -> str:
    """A package statement on another table with the job table's columns."""
    return re.sub(r"\bdurable_jobs_job\b", table, query)


@dataclass
class Layout:
    name: str
    #: The table the jobs are enqueued into and claimed from.
    hot: str = "durable_jobs_job"
    #: The finished jobs' table, when not the hot one.
    history: str | None = None
    setup: list[str] = field(default_factory=list)
    complete_sql: str = QUERIES["record_outcomes"]
    complete_batch: int = 10
    partitioned: bool = False

    @property
    def insert_sql(self) -> str:
        return on_table(QUERIES["insert_jobs_unkeyed"], self.hot)

    @property
    def claim_sql(self) -> str:
        return on_table(QUERIES["claim_jobs"], self.hot)

    @property
    def tables(self) -> list[str]:
        return [self.hot] + ([self.history] if self.history else [])


LAYOUTS = {
    "A": Layout("A"),
    "C": Layout("C", complete_batch=100),
    "B": Layout(
        "B",
        hot="durable_jobs_hot",
        history="durable_jobs_history",
        setup=[B["b_hot_table"], B["b_history_plain"], B["b_view"]],
        complete_sql=B["b_record_outcomes"],
    ),
    "BP": Layout(
        "BP",
        hot="durable_jobs_hot",
        history="durable_jobs_history",
        setup=[B["b_hot_table"], B["b_history_partitioned"], B["b_view"]],
        complete_sql=B["b_record_outcomes"],
        partitioned=True,
    ),
}


def create_partitions(conn: Any, first: datetime, days: int) -> None:
    """One history partition a day, ``days`` of them from ``first`` (UTC midnight)."""
    start = first.replace(hour=0, minute=0, second=0, microsecond=0)
    for i in range(days):
        lo, hi = start + timedelta(days=i), start + timedelta(days=i + 1)
        conn.execute(
            f"CREATE TABLE IF NOT EXISTS durable_jobs_history_{lo:%Y%m%d} "
            f"PARTITION OF durable_jobs_history FOR VALUES FROM ('{lo.isoformat()}') "
            f"TO ('{hi.isoformat()}')"
        )


def with_database(url: str, name: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path=f"/{name}"))


def ensure_template(url: str) -> None:
    """Create and migrate the template database (today's schema) when missing."""
    import worker as bench  # benchmarks/worker.py

    bench.ensure_database(url)
    subprocess.run(
        [sys.executable, "-c", f"import worker; worker.setup_django({url!r})"],
        cwd=HERE.parent,
        check=True,
    )


def make_layout_db(url: str, layout: Layout, suffix: str = "") -> str:
    """(Re)create ``<base>_<layout><suffix>`` from the template; return its URL."""
    import psycopg
    from psycopg import sql

    base = urlsplit(url).path.lstrip("/")
    name = f"{base}_{layout.name.lower()}{suffix}"
    with psycopg.connect(with_database(url, "postgres"), autocommit=True) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
        admin.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(base)
            )
        )
    layout_url = with_database(url, name)
    with psycopg.connect(layout_url, autocommit=True) as conn:
        for statement in layout.setup:
            conn.execute(statement)
        if layout.partitioned:
            create_partitions(conn, datetime.now(UTC) - timedelta(days=1), 3)
    return layout_url


def drop_database(url: str) -> None:
    import psycopg
    from psycopg import sql

    name = urlsplit(url).path.lstrip("/")
    with psycopg.connect(with_database(url, "postgres"), autocommit=True) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))


def backend_cpu(pid: int) -> float:
    """CPU seconds (user + system) of one PostgreSQL backend so far, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100


def relation_sizes(conn: Any, tables: list[str]) -> dict[str, int]:
    """Heap (with TOAST) and index bytes of these tables, partitions included."""
    heap = index = 0
    for table in tables:
        (h, i) = conn.execute(
            """
            SELECT COALESCE(sum(pg_table_size(relid)), 0), COALESCE(sum(pg_indexes_size(relid)), 0)
            FROM (SELECT relid FROM pg_partition_tree(%s::regclass) UNION SELECT %s::regclass) AS t
            """,
            [table, table],
        ).fetchone()
        heap += int(h)
        index += int(i)
    return {"heap": heap, "index": index}
