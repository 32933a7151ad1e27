"""One client's ``enqueue()``, one job per transaction: two source trees interleaved.

Run on demand, never in the test suite:

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/enqueue_ab \
        .venv/bin/python benchmarks/enqueue_ab.py BASE_TREE NEW_TREE [--blocks 40] [--block 250]

On a busy machine, runs of a few seconds each drift by a factor of several
(other processes come and go), so two runs one after the other compare the
machine, not the code. This starts one process per tree (each imports the
package from its tree, migrates nothing: the database is migrated once, by
NEW_TREE), warms both up, then alternates short blocks of ``--block``
enqueues in autocommit, ABAB..., for ``--blocks`` blocks each: drift hits
both alike. Prints each side's median jobs/s over its blocks, the quartiles,
and the median of the per-pair ratios NEW/BASE.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = """
import os, sys, time
sys.path[:0] = [os.path.join(sys.argv[1], "example_project"), sys.argv[1]]
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")
os.environ["DJANGO_DEBUG"] = "0"
import django
django.setup()
import django_durable_jobs
from django_durable_jobs import enqueue
print(django_durable_jobs.__file__, flush=True)
for line in sys.stdin:
    n = int(line)
    start = time.perf_counter()
    for _ in range(n):
        enqueue("benchmark.noop")
    print(n / (time.perf_counter() - start), flush=True)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base", type=Path)
    parser.add_argument("new", type=Path)
    parser.add_argument("--blocks", type=int, default=40)
    parser.add_argument("--block", type=int, default=250)
    args = parser.parse_args()

    env = dict(os.environ)
    subprocess.run(
        [sys.executable, str(args.new / "example_project" / "manage.py"), "migrate", "-v", "0"],
        env={**env, "DJANGO_DEBUG": "0"},
        check=True,
    )
    sides = {}
    for name, tree in (("base", args.base), ("new", args.new)):
        proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(tree.resolve())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert proc.stdout is not None
        assert proc.stdin is not None
        print(f"{name}: {proc.stdout.readline().strip()}")
        sides[name] = proc

    def block(name: str, n: int) -> float:
        proc = sides[name]
        assert proc.stdin is not None
        assert proc.stdout is not None
        proc.stdin.write(f"{n}\n")
        proc.stdin.flush()
        return float(proc.stdout.readline())

    for name in sides:  # warm-up: connections, plans, pages
        block(name, args.block)
    rates: dict[str, list[float]] = {name: [] for name in sides}
    for index in range(args.blocks):
        order = ("base", "new") if index % 2 == 0 else ("new", "base")
        for name in order:
            rates[name].append(block(name, args.block))
    for proc in sides.values():
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(30)
    for name, values in rates.items():
        q1, q2, q3 = statistics.quantiles(values, n=4)
        print(f"{name:5} median {q2:,.0f} jobs/s (quartiles {q1:,.0f} to {q3:,.0f})")
    ratios = [new / base for base, new in zip(rates["base"], rates["new"], strict=True)]
    q1, q2, q3 = statistics.quantiles(ratios, n=4)
    print(f"new/base, pair by pair: median {q2:.3f} (quartiles {q1:.3f} to {q3:.3f})")
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
