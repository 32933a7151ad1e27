"""Load the named queries of the gateway's ``.sql`` files into ``QUERIES``.

SQL lives in ``.sql`` files so it reads (and diffs) as SQL, one beside each
module of the gateway that runs it (``enqueue.sql`` for ``enqueue.py``, and
so on); a header line ``-- name --`` starts each query, the comment lines
after it describe it. A name starting with ``_`` is a fragment, not a
query: a line ``<<_name>>`` (or ``<<_name>>,``, to go on with a WITH) in a
query stands for it (the claim queries share their UPDATE that way, the
inserts their column list), and may itself include fragments. Fragments
and names are shared by all the files: a name is defined once in the
package. Only the gateway (``db/``) runs them.
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

    def include(match: re.Match[str], within: tuple[str, ...] = ()) -> str:
        name = match.group(1)
        if name not in fragments:
            raise ValueError(f"fragment {name!r} is not defined")
        if name in within:
            raise ValueError(f"fragment {name!r} includes itself")
        # A fragment may include others (the rows with parents, their columns).
        body = _INCLUDE.sub(lambda inner: include(inner, (*within, name)), fragments[name])
        return body + match.group(2)

    return {
        name: _INCLUDE.sub(include, sql) for name, sql in parsed.items() if not name.startswith("_")
    }


#: The gateway's SQL files, one per area (see ``db/__init__.py``).
SQL_FILES = (
    "enqueue.sql",
    "claims.sql",
    "flow_control.sql",
    "maintenance.sql",
    "presence.sql",
    "steps.sql",
    "events.sql",
    "health.sql",
)


def _read(name: str) -> str:
    return (
        resources.files(__package__ or "django_durable_jobs.db")
        .joinpath(name)
        .read_text(encoding="utf-8")
    )


QUERIES: dict[str, str] = parse_queries("\n".join(_read(name) for name in SQL_FILES))
