"""pgqueuer in the side-by-side benchmark: its venv, schema, workers and tables.

The worker and the enqueue commands are in ``pgqueuer_side.py``, run in
``.venv-pgqueuer``. Its schema is reinstalled at each invocation with its own
CLI (``pgq uninstall``, ``pgq install``: its default, durable, logged
tables). A finished job leaves the queue table for the log table, whose
``queued``, ``picked`` and ``successful`` rows carry now() of the enqueue,
the claim and the outcome transactions.
"""

from __future__ import annotations

import os
import subprocess
from typing import Any

from harness import PEERS_DIR, Peer, Result, Setting, batches

DEFAULT_SPECS = ["pgqueuer[asyncpg]>=1.6,<1.7"]
DEFAULT_SWEEP: list[Setting] = [10, 50, 100, 200, 500, 1000]
DEFAULT_BATCH = 10  # pgqueuer.run's and `pgq run`'s batch_size default, pgqueuer 1.6


class Pgqueuer(Peer):
    name = "pgqueuer"
    dists = ["pgqueuer", "asyncpg", "uvloop"]
    tables = ("pgqueuer", "pgqueuer_log", "pgqueuer_statistics")  # default prefix, no schema
    side_script = [str(PEERS_DIR / "pgqueuer_side.py")]

    def env(self, setting: Setting = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PGQUEUER_")}
        env.update(PGDSN=self.url, PYTHONPATH=str(PEERS_DIR))
        return env

    def install(self) -> None:
        cli = str(self.venv / "bin" / "pgq")
        if self.db.exists("pgqueuer"):
            subprocess.run([cli, "uninstall"], env=self.env(), check=True)
        subprocess.run([cli, "install"], env=self.env(), check=True)

    def reset(self) -> None:
        self.db.sql(f"TRUNCATE {', '.join(self.tables)}")

    def enqueue(self, n: int) -> Result:
        return self.side("enqueue", "-n", str(n), "--batch", str(n))

    def worker_command(self, setting: Setting, drain: bool) -> list[str]:
        cmd = [str(self.python), *self.side_script, "worker"]
        if setting is not None:
            cmd += ["--batch-size", str(setting)]
        if drain:
            cmd.append("--drain")
        return cmd

    def setting_label(self, setting: Setting) -> str:
        return f"batch {setting}" if setting else f"defaults (batch {DEFAULT_BATCH})"

    def left(self) -> int:
        ((count,),) = self.db.sql("SELECT count(*) FROM pgqueuer")
        return int(count)

    def run_stats(self, n: int, db_start: object) -> Result:
        ((span, first_claim_delay, completed, claims, finishes),) = self.db.sql(
            "SELECT extract(epoch FROM max(created) FILTER (WHERE status = 'successful')"
            "                        - min(created) FILTER (WHERE status = 'picked')),"
            " extract(epoch FROM min(created) FILTER (WHERE status = 'picked') - %s),"
            " count(*) FILTER (WHERE status = 'successful'),"
            " count(DISTINCT created) FILTER (WHERE status = 'picked'),"
            " count(DISTINCT created) FILTER (WHERE status = 'successful')"
            " FROM pgqueuer_log",
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
            " FROM (SELECT extract(epoch FROM picked.created - queued.created) * 1000 AS d"
            "       FROM pgqueuer_log queued JOIN pgqueuer_log picked"
            "         ON picked.job_id = queued.job_id AND picked.status = 'picked'"
            "       WHERE queued.status = 'queued' AND queued.job_id BETWEEN %s AND %s) AS l",
            [int(paced["first_id"]), int(paced["last_id"])],
        )
        return float(p50), float(p90), float(p99), float(mx), float(count)
