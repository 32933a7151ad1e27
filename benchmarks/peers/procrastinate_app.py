"""procrastinate's app for the side-by-side benchmark: one no-op task on an async psycopg pool.

Imported by procrastinate's CLI, which runs the worker::

    PGDSN=... BENCH_POOL_SIZE=16 procrastinate --app=procrastinate_app.app \\
        worker --concurrency 16 --one-shot --log-level warning

and by ``procrastinate_side.py`` (its enqueue commands). It lives in a module
of its own because procrastinate warns about an app created in ``__main__``.
``BENCH_POOL_SIZE`` sets the ``PsycopgConnector`` pool's ``max_size``
(``min_size`` stays psycopg_pool's 4, and so does ``max_size`` where it is
unset); its name is not ``PROCRASTINATE_...``, which the CLI reads as its
own options.
"""

from __future__ import annotations

import os
from typing import Any

import procrastinate

TASK = "noop"


def connector() -> procrastinate.PsycopgConnector:
    options: dict[str, Any] = {}
    if pool := os.environ.get("BENCH_POOL_SIZE"):
        options["max_size"] = max(4, int(pool))  # min_size stays the pool's default, 4
    return procrastinate.PsycopgConnector(conninfo=os.environ["PGDSN"], **options)


app = procrastinate.App(connector=connector())


@app.task(name=TASK)
async def noop(i: int) -> None:
    """The job: nothing. Its argument is the same document ours enqueues, {"i": i}."""
    return None
