"""One side of ``benchmarks/compare.py``: one measurement of one commit, as JSON.

Run by compare.py with the side's own venv python, never by hand:

    <venv>/bin/python benchmarks/compare_side.py --root SIDE_CHECKOUT \
        --database-url URL --out FILE {migrate,enqueue,worker,latency} [options]

It runs the side's own harnesses, ``SIDE_CHECKOUT/benchmarks/enqueue.py``
and ``SIDE_CHECKOUT/benchmarks/worker.py``, by importing them and calling
the functions their ``main()`` calls (``single``, ``bulk``,
``throughput_run``, ``latency_run``): each commit is measured the way its
own benchmarks measure, and nothing parses their printed text. This file
comes from the checkout that runs compare.py, so it can drive a commit
older than itself; it uses only what the harnesses have had since c1b9c5b
(issue 16).
The figures go to ``--out`` as one JSON object (the harnesses and the
workers they start print to standard output).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any


def load(root: Path, name: str) -> ModuleType:
    """Import ``root/benchmarks/<name>.py`` (the side's harness) as ``side_<name>``."""
    path = root / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"side_{name}", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"compare_side: cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def need(module: ModuleType, *names: str) -> None:
    missing = [name for name in names if not hasattr(module, name)]
    if missing:
        raise SystemExit(
            f"compare_side: {module.__file__} has no {', '.join(missing)}: "
            "this commit's harness is older than compare.py can drive"
        )


def migrate(args: argparse.Namespace) -> dict[str, Any]:
    """Migrate the fresh database with the side's own migrations (worker.py's set-up)."""
    worker = load(args.root, "worker")
    need(worker, "setup_django", "sql")
    worker.setup_django(args.database_url)
    ((version,),) = worker.sql("SHOW server_version")
    import django

    return {"postgresql": version, "django": django.get_version(), "python": sys.version.split()[0]}


def enqueue(args: argparse.Namespace) -> dict[str, Any]:
    """enqueue.py's two headline runs: one job per transaction, then enqueue_many."""
    # enqueue.py sets Django up at import, from DATABASE_URL.
    os.environ["DATABASE_URL"] = args.database_url
    bench = load(args.root, "enqueue")
    need(bench, "single", "bulk", "Job", "TYPE")

    def clear() -> None:
        bench.Job.objects.filter(type=bench.TYPE).delete()

    if args.warm_up:
        # As enqueue.py's own warm-up: the connection, the plan caches, the table's pages.
        bench.single(min(args.n, 1_000))
        bench.bulk(min(args.n, 5_000), args.batch, keyed=True)
        clear()
    try:
        single = bench.single(args.n)
        clear()
        bulk = bench.bulk(args.n, args.batch, False)
    finally:
        clear()
    return {"single": single, "bulk": bulk}


def worker_module(args: argparse.Namespace) -> tuple[ModuleType, dict[str, str]]:
    worker = load(args.root, "worker")
    need(worker, "setup_django", "worker_env", "reset", "throughput_run", "latency_run")
    need(worker, "rerun_if_noisy", "QUIET_TIMEOUT_SECONDS")
    # Each run waits for a quiet second first; on a busy machine, not for long.
    worker.QUIET_TIMEOUT_SECONDS = args.quiet_timeout
    worker.setup_django(args.database_url)
    return worker, worker.worker_env(args.database_url)


def throughput(args: argparse.Namespace) -> dict[str, Any]:
    """worker.py's throughput run: N jobs, P worker processes with --burst at -c C."""
    worker, env = worker_module(args)
    try:
        if args.warm_up:
            # As worker.py's own warm-up: the database's caches, the page cache.
            worker.throughput_run(min(args.n, 5_000), 1, None, env)
        run = worker.rerun_if_noisy(
            lambda: worker.throughput_run(args.n, args.processes, args.concurrency, env),
            args.retries,
        )
    finally:
        worker.reset()
    return {
        "wall": run["wall"],
        "span": run["span"],
        "worker_cpu": run["worker_cpu"],
        "pg_cpu": run["pg_cpu"] + run["pg_shared_cpu"],
        "rss_mb": run["rss_mb"],
        "noisy": bool(run.get("noisy")),
    }


def latency(args: argparse.Namespace) -> dict[str, Any]:
    """worker.py's latency run: one idle worker, enqueue() paced at --rate for --seconds."""
    worker, env = worker_module(args)
    try:
        run = worker.latency_run(args.rate, args.seconds, env)
    finally:
        worker.reset()
    return {"p50": run["p50"], "p99": run["p99"], "count": run["count"], "drain": run["drain"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, required=True, help="the side's checkout")
    parser.add_argument("--database-url", required=True, help="the side's own database")
    parser.add_argument("--out", type=Path, required=True, help="where the JSON answer goes")
    parser.add_argument("--warm-up", action="store_true", help="warm up first, as the harness")
    parser.add_argument("--quiet-timeout", type=float, default=30.0)
    parser.add_argument("--retries", type=int, default=1)
    parser.add_argument("-n", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=5_000)
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("what", choices=["migrate", "enqueue", "worker", "latency"])
    args = parser.parse_args()
    args.root = args.root.resolve()
    run = {"migrate": migrate, "enqueue": enqueue, "worker": throughput, "latency": latency}
    result = run[args.what](args)
    args.out.write_text(json.dumps(result))


if __name__ == "__main__":
    main()
