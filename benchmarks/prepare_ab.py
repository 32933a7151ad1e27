"""Worker throughput with PREPARE_STATEMENTS on and off, same tree, alternating (issue 26).

Run on demand, never in the test suite, with the project's virtual environment:

    .venv/bin/python benchmarks/prepare_ab.py [-n 20000] [--pairs 3] [--concurrency 8]
        [--database-url URL]

benchmarks/worker.py's burst run (one process), ``--pairs`` times each way
in the order on off off on on off ...; jobs/s by wall and by span, each
run's and the medians. A tree against itself, so only the setting differs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

import worker as bench  # noqa: E402  (benchmarks/worker.py: its set-up and runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=20_000, help="jobs per run")
    parser.add_argument("--pairs", type=int, default=3, help="runs of each way")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--database-url", default=bench.DEFAULT_URL)
    args = parser.parse_args()
    bench.ensure_database(args.database_url)
    bench.setup_django(args.database_url)
    bench.QUIET_TIMEOUT_SECONDS = 20.0  # a shared machine: wait less, mark the run noisy
    runs: dict[str, list[tuple[float, float, bool]]] = {"1": [], "0": []}
    order = [
        mode for pair in range(args.pairs) for mode in (("1", "0") if pair % 2 == 0 else ("0", "1"))
    ]
    for mode in order:
        env = {**bench.worker_env(args.database_url), "BENCH_PREPARE_STATEMENTS": mode}
        result = bench.rerun_if_noisy(
            lambda env=env: bench.throughput_run(args.n, 1, args.concurrency, env), 0
        )
        wall = args.n / result["wall"]
        span = args.n / result["span"]
        noisy = bool(result.get("noisy"))
        runs[mode].append((wall, span, noisy))
        print(
            f"  prepared={mode}: {wall:,.0f} jobs/s by wall, {span:,.0f} by span"
            f"{' (noisy)' if noisy else ''}; load {bench.loadavg()}",
            flush=True,
        )
    for mode, label in (("1", "prepared"), ("0", "unprepared")):
        walls = [r[0] for r in runs[mode]]
        spans = [r[1] for r in runs[mode]]
        print(
            f"{label:<11} median {statistics.median(walls):,.0f} jobs/s by wall, "
            f"{statistics.median(spans):,.0f} by span; runs {[round(w) for w in walls]}"
        )


if __name__ == "__main__":
    main()
