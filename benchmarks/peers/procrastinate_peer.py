"""procrastinate in the side-by-side benchmark: its venv, schema, workers and tables.

The app (one no-op ``async`` task on an async psycopg pool) is
``procrastinate_app.py``, the enqueue commands ``procrastinate_side.py``,
both run in ``.venv-procrastinate``; the worker is procrastinate's own CLI,
``procrastinate --app=procrastinate_app.app worker``, logging WARNING (its
default, INFO, is a line per job). Its schema cannot be applied twice, so
each invocation empties this benchmark's own database (``DROP SCHEMA public
CASCADE``) and applies it with ``procrastinate schema --apply``. Finished
jobs stay in ``procrastinate_jobs`` (``succeeded``: ``--delete-jobs``
defaults to never); triggers write a ``procrastinate_events`` row at each
transition, stamped with now() of that transaction.
"""

from __future__ import annotations

import os
import subprocess
from typing import Any

from harness import PEERS_DIR, Peer, Result, Setting, batches

DEFAULT_SPECS = ["procrastinate>=3.10,<3.11", "psycopg[binary]"]
#: --concurrency values (each with a pool as large); 1 is the default.
DEFAULT_SWEEP: list[Setting] = [8, 32]
APP = "procrastinate_app.app"


class Procrastinate(Peer):
    name = "procrastinate"
    dists = ["procrastinate", "psycopg", "psycopg-pool"]
    tables = (
        "procrastinate_jobs",
        "procrastinate_events",
        "procrastinate_periodic_defers",
        "procrastinate_workers",
    )
    side_script = [str(PEERS_DIR / "procrastinate_side.py")]

    @property
    def cli(self) -> str:
        return str(self.venv / "bin" / "procrastinate")

    def env(self, setting: Setting = None) -> dict[str, str]:
        # The CLI reads PROCRASTINATE_* as its options: none of ours may leak in.
        env = {k: v for k, v in os.environ.items() if not k.startswith("PROCRASTINATE_")}
        env.update(PGDSN=self.url, PYTHONPATH=str(PEERS_DIR))
        if setting is not None:
            env["BENCH_POOL_SIZE"] = str(setting)
        return env

    def install(self) -> None:
        if self.db.exists("procrastinate_jobs"):
            self.db.sql("DROP SCHEMA public CASCADE")
            self.db.sql("CREATE SCHEMA public")
        subprocess.run(
            [self.cli, f"--app={APP}", "schema", "--apply"],
            env=self.env(),
            check=True,
            stdout=subprocess.DEVNULL,
        )

    def worker_command(self, setting: Setting, drain: bool) -> list[str]:
        cmd = [self.cli, f"--app={APP}", "--log-level", "warning", "worker"]
        if setting is not None:
            cmd += ["--concurrency", str(setting)]
        if drain:
            cmd.append("--one-shot")
        return cmd

    def setting_label(self, setting: Setting) -> str:
        if setting is None:
            return "defaults (concurrency 1, pool 4)"
        return f"concurrency {setting}, pool {max(4, int(setting))}"

    def left(self) -> int:
        ((count,),) = self.db.sql(
            "SELECT count(*) FROM procrastinate_jobs WHERE status IN ('todo', 'doing')"
        )
        return int(count)

    def run_stats(self, n: int, db_start: object) -> Result:
        ((span, first_claim_delay, completed, claims, finishes),) = self.db.sql(
            "SELECT extract(epoch FROM max(at) FILTER (WHERE type = 'succeeded')"
            "                        - min(at) FILTER (WHERE type = 'started')),"
            " extract(epoch FROM min(at) FILTER (WHERE type = 'started') - %s),"
            " count(*) FILTER (WHERE type = 'succeeded'),"
            " count(DISTINCT at) FILTER (WHERE type = 'started'),"
            " count(DISTINCT at) FILTER (WHERE type = 'succeeded')"
            " FROM procrastinate_events",
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
            "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY d),"
            " percentile_cont(0.9) WITHIN GROUP (ORDER BY d),"
            " percentile_cont(0.99) WITHIN GROUP (ORDER BY d), max(d), count(*)"
            " FROM (SELECT extract(epoch FROM started.at - deferred.at) * 1000 AS d"
            "       FROM procrastinate_events deferred JOIN procrastinate_events started"
            "         ON started.job_id = deferred.job_id AND started.type = 'started'"
            "       WHERE deferred.type = 'deferred' AND deferred.job_id BETWEEN %s AND %s) AS l",
            [int(paced["first_id"]), int(paced["last_id"])],
        )
        return float(p50), float(p90), float(p99), float(mx), float(count)
