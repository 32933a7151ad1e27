"""Load the named queries of ``queries.sql`` into ``QUERIES``.

SQL lives in a ``.sql`` file so it reads (and diffs) as SQL; a header line
``-- name --`` starts each query, the comment lines after it describe it.
A name starting with ``_`` is a fragment, not a query: a line ``<<_name>>``
(or ``<<_name>>,``, to go on with a WITH) in a query stands for it (the
claim queries share their UPDATE that way).
Only the gateway (``db/__init__.py``) runs them.
"""

from __future__ import annotations

import re
from importlib import resources

_HEADER = re.compile(r"^-- ([a-z_][a-z0-9_]*) --$")
_INCLUDE = re.compile(r"^\s*<<(_[a-z0-9_]+)>>(,?)\s*$", re.MULTILINE)


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
    fragments = {name: sql for name, sql in parsed.items() if name.startswith("_")}

    def include(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in fragments:
            raise ValueError(f"fragment {name!r} is not defined")
        return fragments[name] + match.group(2)

    return {
        name: _INCLUDE.sub(include, sql) for name, sql in parsed.items() if not name.startswith("_")
    }


QUERIES: dict[str, str] = parse_queries(
    resources.files(__package__ or "django_durable_jobs.db")
    .joinpath("queries.sql")
    .read_text(encoding="utf-8")
)
