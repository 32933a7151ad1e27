"""benchmarks/compare.py's pure parts: its arguments, the interleaving, the table.

Nothing here runs a benchmark or times anything: the runs themselves are
compare.py's job, on demand (docs/development.md).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "compare.py"


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("benchmarks_compare", PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # dataclasses look their module up in sys.modules.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


compare = load()


# -- arguments ---------------------------------------------------------------------


def test_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DATABASE_URL", raising=False)
    args = compare.parse_args(["abc123"])
    assert (args.base, args.head) == ("abc123", "HEAD")
    assert (args.n, args.rounds, args.batch) == (20_000, 3, 5_000)
    assert args.only == ["enqueue", "worker", "latency"]
    assert args.workers == [(1, 8), (2, 8)]
    assert (args.rate, args.seconds) == (200.0, 10.0)
    assert args.database_url == compare.DEFAULT_SERVER
    assert not args.markdown and not args.no_cache


def test_a_small_run() -> None:
    args = compare.parse_args(
        ["main~5", "main", "-n", "5_000", "--rounds", "2", "--only", "worker, latency",
         "--workers", "1x4,2X16", "--seconds", "2.5", "--markdown"]
    )  # fmt: skip
    assert (args.base, args.head, args.n, args.rounds) == ("main~5", "main", 5_000, 2)
    assert args.only == ["worker", "latency"]
    assert args.workers == [(1, 4), (2, 16)]
    assert args.seconds == 2.5 and args.markdown


def test_database_url_from_the_environment_unless_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgres://u:p@db:5433/app")
    assert compare.parse_args(["a"]).database_url == "postgres://u:p@db:5433/app"
    given = compare.parse_args(["a", "--database-url", "postgres://x@y/z"])
    assert given.database_url == "postgres://x@y/z"


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["a", "-n", "0"],
        ["a", "-n", "many"],
        ["a", "--rounds", "0"],
        ["a", "--only", "throughput"],
        ["a", "--only", ","],
        ["a", "--workers", "2"],
        ["a", "--workers", "1x0"],
        ["a", "--workers", "1x8,"],
        ["a", "--rate", "0"],
        ["a", "--seconds", "-1"],
        ["a", "--retries", "-1"],
        ["a", "--cache-dir", "cache", "--no-cache"],
    ],
)
def test_bad_arguments_are_refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        compare.parse_args(argv)
    assert exited.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_each_side_has_a_cmp_database_on_the_same_server() -> None:
    url = compare.side_database_url(
        "postgres://u:secret@db.example:5433/postgres?sslmode=require", "BASE", "f" * 40, 42
    )
    assert url == f"postgres://u:secret@db.example:5433/cmp_base_{'f' * 10}_42?sslmode=require"
    head = compare.side_database_url("postgres://u@h/postgres", "HEAD", "f" * 40, 42)
    assert compare.database_name(head) == f"cmp_head_{'f' * 10}_42"


# -- what runs, in which order -------------------------------------------------------


def test_measurements_follow_only_and_workers() -> None:
    m = compare.Measurement
    assert compare.measurements(["latency", "enqueue"], [(1, 8)]) == [m("enqueue"), m("latency")]
    assert compare.measurements(["worker"], [(1, 8), (2, 4)]) == [
        m("worker", 1, 8),
        m("worker", 2, 4),
    ]
    assert m("worker", 2, 4).label == "worker 2 x -c 4"


def sides(steps: list[object]) -> str:
    return " ".join("A" if step.side == "BASE" else "B" for step in steps)  # type: ignore[attr-defined]


def test_interleaving_is_a_b_b_a() -> None:
    plan = compare.measurements(["enqueue", "latency"], [])
    steps = compare.schedule(2, plan)
    assert sides(steps) == "A B B A B A A B"
    assert [(s.round, s.measurement.kind) for s in steps[:4]] == [
        (0, "enqueue"), (0, "enqueue"), (0, "latency"), (0, "latency")
    ]  # fmt: skip


def test_one_measurement_alternates_from_round_to_round() -> None:
    steps = compare.schedule(4, compare.measurements(["enqueue"], []))
    assert sides(steps) == "A B B A A B B A"


@pytest.mark.parametrize(
    ("kinds", "workers"), [(["worker"], [(1, 8), (2, 8)]), (list(compare.KINDS), [(1, 8), (2, 8)])]
)
def test_over_even_rounds_each_side_goes_first_equally_in_every_measurement(
    kinds: list[str], workers: list[tuple[int, int]]
) -> None:
    plan = compare.measurements(kinds, workers)
    steps = compare.schedule(4, plan)
    assert len(steps) == 4 * len(plan) * 2
    for measurement in plan:
        pairs = [s for s in steps if s.measurement == measurement]
        firsts = [pair.side for pair in pairs[::2]]
        assert firsts.count("BASE") == firsts.count("HEAD") == 2
        # Each pair is both sides.
        assert all(
            {a.side, b.side} == {"BASE", "HEAD"}
            for a, b in zip(pairs[::2], pairs[1::2], strict=True)
        )


def test_the_first_enqueue_and_worker_run_of_each_side_warm_up() -> None:
    plan = compare.measurements(list(compare.KINDS), [(1, 8), (2, 8)])
    steps = compare.schedule(2, plan)
    warm = [(s.side, s.measurement.label) for s in steps if s.warm_up]
    assert sorted(warm) == [
        ("BASE", "enqueue"), ("BASE", "worker 1 x -c 8"),
        ("HEAD", "enqueue"), ("HEAD", "worker 1 x -c 8"),
    ]  # fmt: skip
    assert all(s.round == 0 for s in steps if s.warm_up)


def test_each_step_passes_its_options_to_the_side() -> None:
    args = compare.parse_args(["a", "-n", "5000", "--seconds", "5"])
    plan = compare.measurements(list(compare.KINDS), [(2, 16)])
    enqueue, worker, latency = compare.schedule(1, plan)[::2]
    assert compare.options_for(enqueue, args) == ["-n", "5000", "--batch", "5000", "--warm-up"]
    assert compare.options_for(worker, args)[4:] == [
        "--processes", "2", "--concurrency", "16", "--warm-up"
    ]  # fmt: skip
    assert compare.options_for(latency, args)[4:] == ["--rate", "200.0", "--seconds", "5.0"]


# -- the table -----------------------------------------------------------------------


def test_figures_of_a_worker_run_are_per_job() -> None:
    figures = compare.metrics_of(
        compare.Measurement("worker", 2, 8),
        {"wall": 2.0, "span": 1.0, "worker_cpu": 0.5, "pg_cpu": 0.25, "noisy": False},
        10_000,
    )
    assert {m.name: v for m, v in figures.items()} == {
        "worker 2 x -c 8, by wall": 5_000.0,
        "worker 2 x -c 8, by span": 10_000.0,
        "worker 2 x -c 8, worker CPU": 50.0,
        "worker 2 x -c 8, PostgreSQL CPU": 25.0,
    }
    assert [m.better for m in figures] == ["higher", "higher", "lower", "lower"]


def rows_of(*runs: tuple[str, dict[str, float], bool]) -> dict[object, object]:
    rows: dict[object, object] = {}
    for side, result, noisy in runs:
        figures = compare.metrics_of(compare.Measurement("enqueue"), result, 1_000)
        compare.collect(rows, side, figures, noisy)
    return rows


def test_medians_and_ratios() -> None:
    rows = rows_of(
        ("BASE", {"single": 1_000, "bulk": 40_000}, False),
        ("HEAD", {"single": 1_500, "bulk": 30_000}, False),
        ("HEAD", {"single": 1_100, "bulk": 50_000}, False),
        ("BASE", {"single": 1_200, "bulk": 44_000}, False),
        ("BASE", {"single": 3_000, "bulk": 42_000}, False),
    )
    single, bulk = rows.values()
    assert single.median("BASE") == 1_200  # type: ignore[attr-defined]
    assert single.median("HEAD") == 1_300  # type: ignore[attr-defined]
    assert single.ratio == pytest.approx(1_300 / 1_200)  # type: ignore[attr-defined]
    assert bulk.ratio == pytest.approx(40_000 / 42_000)  # type: ignore[attr-defined]
    # The runs in the order they ran.
    assert [s.value for s in single.runs["BASE"]] == [1_000, 1_200, 3_000]  # type: ignore[attr-defined]


def test_a_side_without_runs_has_no_median_and_no_ratio() -> None:
    (row, _bulk) = rows_of(("BASE", {"single": 1_000, "bulk": 40_000}, False)).values()
    assert row.median("HEAD") is None and row.ratio is None  # type: ignore[attr-defined]
    text = compare.table([row], "aaaaaaa", "bbbbbbb")
    assert text.splitlines()[1].split()[-4:] == ["-", "-", "1,000", "-"]


def test_the_text_table() -> None:
    rows = rows_of(
        ("BASE", {"single": 1_000, "bulk": 40_000}, False),
        ("HEAD", {"single": 1_100, "bulk": 36_000}, True),
    )
    lines = compare.table(rows.values(), "aaaaaaa", "bbbbbbb").splitlines()
    # Text left-aligned: the columns start where their headings do.
    assert lines[0].index("better") == lines[1].index("higher") == lines[2].index("higher")
    assert "BASE aaaaaaa" in lines[0] and "HEAD bbbbbbb" in lines[0] and "HEAD/BASE" in lines[0]
    assert lines[1].split() == [
        "enqueue,", "one", "per", "transaction", "(jobs/s)", "higher",
        "1,000", "1,100", "1.100", "1,000", "1,100*",
    ]  # fmt: skip
    assert lines[2].split()[-5:] == ["40,000", "36,000", "0.900", "40,000", "36,000*"]
    # Numbers right-aligned: the medians end in the same column.
    assert lines[1].index("1,000") + 5 == lines[2].index("40,000") + 6


def test_the_markdown_table() -> None:
    rows = rows_of(
        ("BASE", {"single": 1_000, "bulk": 40_000}, False),
        ("BASE", {"single": 2_000, "bulk": 40_000}, False),
        ("HEAD", {"single": 1_500, "bulk": 40_000}, False),
    )
    lines = compare.table(rows.values(), "aaaaaaa", "bbbbbbb", markdown=True).splitlines()
    assert lines[0] == (
        "| metric | better | BASE aaaaaaa | HEAD bbbbbbb | HEAD/BASE | runs BASE | runs HEAD |"
    )
    assert lines[1].count("|") == 8
    assert lines[2] == (
        "| enqueue, one per transaction (jobs/s) | higher | 1,500 | 1,500 | 1.000"
        " | 1,000 2,000 | 1,500 |"
    )
    assert len(lines) == 4
