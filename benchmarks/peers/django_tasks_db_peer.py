"""django-tasks-db in the side-by-side benchmark: its venv, project, workers and tables.

django-tasks-db (``DatabaseBackend``, the ORM backend that django-tasks
shipped until 0.12 and that lives in its own package since) with Django 5.2
and django-tasks, its ``compat`` extra (the backport of ``django.tasks``),
in ``.venv-django-tasks-db``. Its worker, ``manage.py db_worker``, needs a
Django project: ``django_tasks_db_project/`` (settings, the no-op task,
``manage.py`` and the enqueue commands, ``side.py``). Its tables are made by
``manage.py migrate`` at each invocation and emptied before each run.

``db_worker`` claims one task per transaction (``select_for_update(
skip_locked=True).first()``, then a save), runs it, and saves its outcome;
it has no concurrency option, and ``--batch`` makes it exit once the queue
is empty. Its ``-v 0`` keeps it quiet (at the default verbosity it logs
every task at INFO).
"""

from __future__ import annotations

import os
import subprocess
from typing import Any

from harness import PEERS_DIR, Peer, Result, Setting, batches

DEFAULT_SPECS = ["django-tasks-db[compat]>=0.13,<0.14", "Django>=5.2,<6.0", "psycopg[binary]"]
#: The settings that change its throughput: the random start-up delay of up
#: to 1 s (``--no-startup-delay``), then Django's connection health check
#: (CONN_HEALTH_CHECKS, on in our example project and so here by default):
#: one more round trip around every task.
SETTINGS = ("nodelay", "nodelay-nocheck")
DEFAULT_SWEEP: list[Setting] = list(SETTINGS)
TABLE = "django_tasks_database_dbtaskresult"


class DjangoTasksDb(Peer):
    name = "django-tasks-db"
    dists = ["django-tasks-db", "django-tasks", "Django", "psycopg"]
    tables = (TABLE,)
    cwd = PEERS_DIR / "django_tasks_db_project"
    side_script = ["side.py"]

    def env(self, setting: Setting = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("DJANGO_")}
        env.update(
            DATABASE_URL=self.url,
            DJANGO_SETTINGS_MODULE="settings",
            PYTHONPATH=str(self.cwd),
            BENCH_HEALTH_CHECKS="0" if setting == "nodelay-nocheck" else "1",
        )
        return env

    def install(self) -> None:
        subprocess.run(
            [str(self.python), "manage.py", "migrate", "-v", "0"],
            env=self.env(),
            cwd=self.cwd,
            check=True,
        )

    def worker_command(self, setting: Setting, drain: bool) -> list[str]:
        cmd = [str(self.python), "manage.py", "db_worker", "-v", "0"]
        if setting is not None:
            if setting not in SETTINGS:
                raise ValueError(f"django-tasks-db setting {setting!r}: one of {SETTINGS}")
            cmd.append("--no-startup-delay")
        if drain:
            cmd.append("--batch")
        return cmd

    def setting_label(self, setting: Setting) -> str:
        if setting is None:
            return "defaults"
        if setting == "nodelay":
            return "`--no-startup-delay`"
        return "`--no-startup-delay`, no health checks"

    def left(self) -> int:
        ((count,),) = self.db.sql(
            f"SELECT count(*) FROM {TABLE} WHERE status IN ('READY', 'RUNNING')"  # noqa: S608
        )
        return int(count)

    def run_stats(self, n: int, db_start: object) -> Result:
        # started_at and finished_at are the worker's clock (timezone.now()),
        # the same machine's as PostgreSQL's.
        # S608: TABLE is a constant; values are parameters.
        ((span, first_claim_delay, completed, claims, finishes),) = self.db.sql(
            "SELECT extract(epoch FROM max(finished_at) - min(started_at)),"  # noqa: S608
            " extract(epoch FROM min(started_at) - %s),"
            " count(*) FILTER (WHERE status = 'SUCCESSFUL'),"
            " count(DISTINCT started_at), count(DISTINCT finished_at)"
            f" FROM {TABLE}",
            [db_start],
        )
        assert completed == n, completed
        return {
            "span": float(span),
            "startup": float(first_claim_delay),
            "claim_batch": batches(n, claims),
            "finish_batch": batches(n, finishes),
        }

    def latency_stats(self, paced: dict[str, Any]) -> tuple[float, ...]:
        ((p50, p90, p99, mx, count),) = self.db.sql(
            "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY d),"  # noqa: S608 (as above)
            " percentile_cont(0.9) WITHIN GROUP (ORDER BY d),"
            " percentile_cont(0.99) WITHIN GROUP (ORDER BY d), max(d), count(*)"
            " FROM (SELECT extract(epoch FROM started_at - enqueued_at) * 1000 AS d"
            f"      FROM {TABLE} WHERE enqueued_at >= %s::timestamptz) AS l",
            [paced["since"]],
        )
        return float(p50), float(p90), float(p99), float(mx), float(count)
