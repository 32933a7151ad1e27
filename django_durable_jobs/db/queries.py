"""Load the named queries of ``queries.sql`` into ``QUERIES``.

SQL lives in a ``.sql`` file so it reads (and diffs) as SQL; a header line
``-- name --`` starts each query, the comment lines after it describe it.
Only the gateway (``db/__init__.py``) runs them.
"""

from __future__ import annotations

import re
from importlib import resources

_HEADER = re.compile(r"^-- ([a-z_][a-z0-9_]*) --$")


def parse_queries(text: str) -> dict[str, str]:
    """Split ``text`` into ``{name: sql}``; comments before the first header are ignored."""
    queries: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        header = _HEADER.match(line.strip())
        if header:
            name = header.group(1)
            if name in queries:
                raise ValueError(f"query {name!r} is defined twice")
            current = queries[name] = []
        elif current is not None:
            current.append(line)
    parsed = {}
    for name, lines in queries.items():
        sql = "\n".join(
            line for line in lines if line.strip() and not line.lstrip().startswith("--")
        ).strip()
        if not sql:
            raise ValueError(f"query {name!r} is empty")
        parsed[name] = sql.rstrip(";").rstrip()
    return parsed


QUERIES: dict[str, str] = parse_queries(
    resources.files(__package__ or "django_durable_jobs.db")
    .joinpath("queries.sql")
    .read_text(encoding="utf-8")
)
