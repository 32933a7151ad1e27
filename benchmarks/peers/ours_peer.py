"""django-durable-jobs in the side-by-side benchmark: benchmarks/worker.py's runs, as a Peer.

Runs in this process (the project's venv, with Django): the workers are
``manage.py runjobworker --burst [--concurrency C]`` of the example project
with ``benchmarks/bench_settings.py`` (logging WARNING); the enqueue runs
are benchmarks/enqueue.py's single and bulk; the big-table run is
worker.py's ``--finished-rows``.
"""

from __future__ import annotations

import importlib.metadata
import time
from typing import Any

from harness import Peer, Result, Setting, median_of, ours, say

DEFAULT_SWEEP: list[Setting] = [8, 16, 32, 64, 128]


class Ours(Peer):
    name = "ours"

    def __init__(self, url: str, sweep: list[Setting]) -> None:
        super().__init__(url, [], sweep)

    def prepare(self) -> None:
        ours.ensure_database(self.url)
        ours.setup_django(self.url)
        self.worker_env = ours.worker_env(self.url)
        self.version = importlib.metadata.version("django-durable-jobs")
        import django
        import psycopg

        self.about = f"Django {django.get_version()}, psycopg {psycopg.__version__}"

    @property
    def title(self) -> str:
        return "ours"

    def setting_label(self, setting: Setting) -> str:
        return f"`-c {setting}`" if setting else "defaults"

    def reset(self) -> None:
        ours.reset()

    def enqueue(self, n: int) -> Result:
        """benchmarks/enqueue.py's single and bulk, on the benchmark database."""
        from django_durable_jobs import enqueue, enqueue_many

        def single(count: int) -> float:
            start = time.perf_counter()
            for i in range(count):
                enqueue(ours.TYPE, {"i": i})
            return count / (time.perf_counter() - start)

        def bulk(count: int) -> float:
            jobs = [{"type": ours.TYPE, "payload": {"i": i}} for i in range(count)]
            start = time.perf_counter()
            enqueue_many(jobs)
            return count / (time.perf_counter() - start)

        ours.reset()
        single(1_000)  # warm up, as the peers' sides do
        bulk(5_000)
        ours.reset()
        one = single(n)
        ours.reset()
        many = bulk(n)
        ours.reset()
        return {"single": one, "bulk": many}

    def throughput_run(self, n: int, processes: int, setting: Setting) -> Result:
        concurrency = int(setting) if setting is not None else None
        return ours.throughput_run(n, processes, concurrency, self.worker_env)

    def latency_run(self, rate: float, seconds: float) -> Result:
        return ours.latency_run(rate, seconds, self.worker_env)

    def big_table(self, n: int, rows: int, repeat: int, retries: int) -> dict[int, Result]:
        """One worker at the defaults, on an empty table, then with ``rows`` finished jobs.

        worker.py's ``--finished-rows`` run: the finished jobs are written
        by SQL (completed over the last day, one in fifty dead) and kept
        between runs; the table is emptied afterwards.
        """
        out: dict[int, Result] = {}
        try:
            for count in (0, rows):
                started = time.monotonic()
                ours.fill_finished(count)
                if count:
                    took = time.monotonic() - started
                    say(f"  ({count:,} finished jobs written in {took:.0f} s)")
                ours.throughput_run(min(n, 5_000), 1, None, self.worker_env, keep_finished=True)
                runs = [
                    ours.rerun_if_noisy(
                        lambda: ours.throughput_run(
                            n, 1, None, self.worker_env, keep_finished=True
                        ),
                        retries,
                    )
                    for _ in range(repeat)
                ]
                out[count] = med = median_of(runs)
                each = ", ".join(f"{n / r['wall']:,.0f}" for r in runs)
                say(
                    f"  {count:>12,} finished rows: {n / med['wall']:>9,.0f} jobs/s wall"
                    f"{n / med['span']:>9,.0f} span  pg {med['pg_cpu']:.2f} CPU s"
                    f"  (runs {each})"
                )
        finally:
            ours.reset()
        return out

    def latency_stats(self, paced: dict[str, Any]) -> tuple[float, ...]:
        raise NotImplementedError("ours measures latency with worker.py's latency_run")
