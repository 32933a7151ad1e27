#!/usr/bin/env python3
"""Merge a CI run's coverage data and hold it to the baseline measured before CI was split.

    .ci/coverage_gate.py [--data DIR] [--write]

Runs inside .venv (coverage is in the test extras). Combines the data files
that every process of the run wrote into DIR (COVERAGE_FILE=DIR/cov, with
[tool.coverage.run]'s `parallel` and `patch = subprocess`), prints the report,
then compares with .ci/coverage-baseline.json: each file whose coverage fell
is listed, and the gate fails when the total is below the baseline's total.
`--write` makes the baseline from this run instead (docs/development.md,
"Coverage": when to do that, and why not to lower it in passing).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BASELINE = ROOT / ".ci" / "coverage-baseline.json"
PYTHON = ROOT / ".venv" / "bin" / "python"


def coverage(*args: str, data: Path) -> None:
    subprocess.run(
        [str(PYTHON), "-m", "coverage", *args],
        cwd=ROOT,
        check=True,
        env={"COVERAGE_FILE": str(data / "cov"), "PATH": "/usr/bin:/bin"},
    )


def measure(data: Path) -> dict[str, Any]:
    if any(data.glob("cov.*")):
        # Into DIR/cov, with what an earlier combine left there.
        coverage("combine", "--append", "--quiet", str(data), data=data)
    report = data / "coverage.json"
    coverage("json", "--quiet", "-o", str(report), data=data)
    raw = json.loads(report.read_text())
    files = {
        name: {
            "statements": info["summary"]["num_statements"],
            "covered": info["summary"]["covered_lines"],
            "percent": round(info["summary"]["percent_covered"], 2),
        }
        for name, info in sorted(raw["files"].items())
    }
    totals = raw["totals"]
    return {
        "total": {
            "statements": totals["num_statements"],
            "covered": totals["covered_lines"],
            "percent": round(totals["percent_covered"], 2),
        },
        "files": files,
    }


def main() -> int:
    parser = argparse.ArgumentParser(prog=".ci/coverage_gate.py")
    parser.add_argument("--data", type=Path, default=ROOT / ".coverage-data")
    parser.add_argument("--write", action="store_true", help="write the baseline from this run")
    parser.add_argument("--report", action="store_true", help="print coverage's per-file report")
    args = parser.parse_args()
    data = args.data.resolve()
    if not any(data.glob("cov*")):
        print(f"coverage-gate: no coverage data in {data}", file=sys.stderr)
        return 1
    now = measure(data)
    if args.report:
        coverage("report", "--skip-covered", "--sort=cover", data=data)
    total = now["total"]
    print(
        f"coverage: {total['percent']:.2f}% "
        f"({total['covered']} of {total['statements']} statements)"
    )
    if args.write:
        BASELINE.write_text(json.dumps(now, indent=1) + "\n")
        print(f"baseline written to {BASELINE.relative_to(ROOT)}")
        return 0
    base = json.loads(BASELINE.read_text())
    drops = []
    for name, was in base["files"].items():
        is_ = now["files"].get(name)
        if is_ is None:
            drops.append(f"  {name}: gone (was {was['percent']:.2f}%; moved or removed?)")
        elif is_["percent"] < was["percent"]:
            lost = was["covered"] - is_["covered"]
            drops.append(
                f"  {name}: {was['percent']:.2f}% -> {is_['percent']:.2f}% ({lost:+d} lines fewer)"
            )
    new = sorted(set(now["files"]) - set(base["files"]))
    if drops:
        print(f"files below their baseline ({len(drops)}):")
        print("\n".join(drops))
    if new:
        print(f"files new since the baseline: {', '.join(new)}")
    base_total = base["total"]["percent"]
    if total["percent"] < base_total:
        print(
            f"coverage-gate: FAILED: {total['percent']:.2f}% is below the baseline "
            f"{base_total:.2f}% (.ci/coverage-baseline.json)",
            file=sys.stderr,
        )
        return 1
    print(f"coverage-gate: ok (baseline {base_total:.2f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
