"""The side-by-side tables, in Markdown: results, ratios, every configuration, the big table."""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import textwrap
from collections.abc import Callable
from typing import Any

from harness import Peer, Result, Setting

Runs = dict[tuple[int, Setting], Result]


def best(runs: Runs, processes: int) -> tuple[Setting, Result]:
    """The setting with the highest wall throughput (start-up included)."""
    candidates = {s: r for (p, s), r in runs.items() if p == processes}
    setting = min(candidates, key=lambda s: candidates[s]["wall"])
    return setting, candidates[setting]


def cpu_per_job(r: Result, n: int) -> float:
    """Worker and PostgreSQL CPU milliseconds per job."""
    return (r["worker_cpu"] + r["pg_cpu"] + r["pg_shared_cpu"]) / n * 1000


class Row:
    """One figure for every side; ``higher`` says which way is better (for the ratios)."""

    def __init__(
        self, label: str, values: dict[str, float | None], shown: dict[str, str], higher: bool
    ) -> None:
        self.label = label
        self.values = values
        self.shown = shown
        self.higher = higher


def headline_rows(
    args: argparse.Namespace, n: int, sides: list[Peer], results: dict[str, Any]
) -> list[Row]:
    """The figures of the first table (and of the chart), one row each, every side."""
    runs: dict[str, Runs] = results["runs"]
    rows: list[Row] = []

    def add(label: str, higher: bool, value: Callable[[Peer], tuple[float, str] | None]) -> None:
        values: dict[str, float | None] = {}
        shown: dict[str, str] = {}
        for side in sides:
            got = value(side)
            values[side.name] = got[0] if got else None
            shown[side.name] = got[1] if got else "n/a"
        rows.append(Row(label, values, shown, higher))

    def rate(r: Result) -> float:
        return n / r["wall"]

    enqueue = results["enqueue"]
    if enqueue:
        add(
            "enqueue, one per transaction (jobs/s)", True,
            lambda s: (e := enqueue[s.name]["single"], f"{e:,.0f}"),
        )  # fmt: skip
        add(
            f"enqueue, bulk: {n:,} in one call (jobs/s; django-tasks-db: one transaction)", True,
            lambda s: (e := enqueue[s.name]["bulk"], f"{e:,.0f}"),
        )  # fmt: skip
    for processes in (1, 2):
        add(
            f"processing, defaults, {processes} process{'es' if processes > 1 else ''} (jobs/s)",
            True,
            lambda s, p=processes: (v := rate(runs[s.name][(p, None)]), f"{v:,.0f}"),
        )  # fmt: skip
    for processes in (1, 2):

        def best_rate(side: Peer, p: int = processes) -> tuple[float, str]:
            setting, r = best(runs[side.name], p)
            return rate(r), f"{rate(r):,.0f} ({side.setting_label(setting)})"

        add(
            f"processing, best setting, {processes} process{'es' if processes > 1 else ''}"
            " (jobs/s)",
            True,
            best_rate,
        )
    latency = results["latency"]
    if latency:
        for q in ("p50", "p99"):
            add(
                f"enqueue-to-start {q} at {args.rate:g} jobs/s, one worker at defaults (ms)",
                False,
                lambda s, q=q: (v := latency[s.name][q], f"{v:,.2f}"),
            )  # fmt: skip
    add(
        "worker peak RSS, defaults, one process (MB)", False,
        lambda s: (v := runs[s.name][(1, None)]["rss_max"], f"{v:.1f}"),
    )  # fmt: skip
    add(
        "CPU per job, worker + PostgreSQL, defaults, one process (ms)", False,
        lambda s: (v := cpu_per_job(runs[s.name][(1, None)], n), f"{v:.3f}"),
    )  # fmt: skip

    def best_cpu(side: Peer) -> tuple[float, str]:
        setting, r = best(runs[side.name], 2)
        return cpu_per_job(r, n), f"{cpu_per_job(r, n):.3f} ({side.setting_label(setting)})"

    add("CPU per job, worker + PostgreSQL, best two-process setting (ms)", False, best_cpu)

    return rows


def render(
    args: argparse.Namespace, n: int, pg_version: str, sides: list[Peer], results: dict[str, Any]
) -> str:
    names = [side.name for side in sides]
    runs: dict[str, Runs] = results["runs"]
    rows = headline_rows(args, n, sides, results)
    latency = results["latency"]

    def rate(r: Result) -> float:
        return n / r["wall"]

    today = datetime.date.today().isoformat()
    titles = [side.title for side in sides]
    lines = [
        f"Side by side, {today}: {n:,} no-op jobs, PostgreSQL {pg_version}, "
        f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]}; median of {args.repeat} "
        f"(latency: of {args.latency_repeat}); jobs/s wall, start-up included.",
        "",
        *(f"- {side.title}: {side.about}" for side in sides),
        "",
        "| | " + " | ".join(titles) + " |",
        "|---" * (len(sides) + 1) + "|",
        *(f"| {r.label} | " + " | ".join(r.shown[x] for x in names) + " |" for r in rows),
        "",
        "Ours against each peer (above 1: ours better; rates ours / peer, times, memory "
        "and CPU peer / ours):",
        "",
        "| | " + " | ".join(titles[1:]) + " |",
        "|---" * len(sides) + "|",
    ]
    for r in rows:
        cells = []
        mine = r.values["ours"]
        for x in names[1:]:
            theirs = r.values[x]
            if not mine or not theirs:
                cells.append("n/a")
            else:
                cells.append(f"{(mine / theirs if r.higher else theirs / mine):.2f}x")
        lines.append(f"| {r.label} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Every throughput configuration (median of each; CPU: seconds for the whole run; "
        "claim / finish: mean jobs per claim / per outcome statement):",
        "",
        "| side | processes | setting | jobs/s wall | jobs/s span | start-up s | worker CPU s "
        "| PostgreSQL CPU s | busy | peak RSS MB | claim / finish |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for side in sides:
        for (processes, s), r in runs[side.name].items():
            noisy = f" ({r['noisy']:.0f} of {r['runs']:.0f} noisy)" if r["noisy"] else ""
            lines.append(
                f"| {side.title} | {processes} | {side.setting_label(s)}{noisy} | {rate(r):,.0f} "
                f"| {n / r['span']:,.0f} | {r['startup']:.2f} | {r['worker_cpu']:.2f} "
                f"| {r['pg_cpu'] + r['pg_shared_cpu']:.2f} | {r['busy']:.0%} "
                f"| {r['rss_max']:.1f} | {r['claim_batch']:.1f} / {r['finish_batch']:.1f} |"
            )
    if latency:
        lines += [
            "",
            f"Latency at {args.rate:g} jobs/s for {args.seconds:g} s (ms; enqueue: the "
            "producer's call; drain: seconds from the last enqueue until every job was "
            "done, about 0.1 when the worker kept up with the rate, the backlog's length "
            "when it did not):",
            "",
            "| side | p50 | p90 | p99 | max | jobs | drain s | enqueue p50 | enqueue p99 "
            "| worker RSS MB |",
            "|---|---|---|---|---|---|---|---|---|---|",
            *(
                f"| {side.title} | {r['p50']:.2f} | {r['p90']:.2f} | {r['p99']:.2f} "
                f"| {r['max']:.2f} | {r['count']:.0f} | {r['drain']:.1f} | {r['enqueue_p50']:.2f} "
                f"| {r['enqueue_p99']:.2f} | {r['rss_max']:.1f} |"
                for side in sides
                for r in [latency[side.name]]
            ),
        ]
    big: dict[int, Result] = results["big"]
    if big:
        base = big[0]
        lines += [
            "",
            "Ours, one worker at the defaults, as the table of finished jobs grows:",
            "",
            "| finished jobs in the table | jobs/s wall | jobs/s span | against empty "
            "| PostgreSQL CPU s |",
            "|---|---|---|---|---|",
            *(
                f"| {rows:,} | {rate(r):,.0f} | {n / r['span']:,.0f} "
                f"| {base['wall'] / r['wall']:.0%} | {r['pg_cpu'] + r['pg_shared_cpu']:.2f} |"
                for rows, r in big.items()
            ),
        ]
    return "\n".join(lines) + "\n"


def ratios(rows: list[Row], sides: list[Peer]) -> dict[str, list[float | None]]:
    """Ours against each peer, row by row: above 1, ours is better (as in the second table)."""
    out: dict[str, list[float | None]] = {}
    for side in sides[1:]:
        out[side.title] = []
        for r in rows:
            mine, theirs = r.values["ours"], r.values[side.name]
            if not mine or not theirs:
                out[side.title].append(None)
            else:
                out[side.title].append(mine / theirs if r.higher else theirs / mine)
    return out


def chart(rows: list[Row], sides: list[Peer], title: str, path: str) -> bool:
    """The second table as a chart: a bar per peer and figure, on a log scale around 1.

    False (and nothing written) where matplotlib is missing: it is in the
    ``benchmark`` extra, not in the benchmarks' own requirements.
    """
    try:
        import matplotlib
    except ImportError:
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_peer = ratios(rows, sides)
    labels = [r.label for r in rows]
    height = 0.8 / max(1, len(by_peer))
    import matplotlib.ticker

    fig, ax = plt.subplots(figsize=(12, 0.45 * len(labels) * max(1, len(by_peer)) + 1.5))
    for k, (peer, values) in enumerate(by_peer.items()):
        ys = [i + k * height for i in range(len(labels))]
        xs = [v if v is not None else float("nan") for v in values]
        bars = ax.barh(ys, xs, height=height, label=peer)
        for bar, v in zip(bars, values, strict=True):
            if v is not None:
                ax.text(v, bar.get_y() + bar.get_height() / 2, f" {v:.2f}x", va="center",
                        fontsize=7)  # fmt: skip
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(matplotlib.ticker.FixedLocator([0.25, 0.5, 1, 2, 4, 8, 16]))
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}x"))
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.axvline(1.2, color="grey", linestyle="--", linewidth=0.8, label="1.2x (issue 26's target)")
    ax.set_yticks([i + height * (len(by_peer) - 1) / 2 for i in range(len(labels))])
    # Wrapped: the longest label ("enqueue, bulk: ...") was cut at the figure's edge.
    ax.set_yticklabels([textwrap.fill(label, 42) for label in labels], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("ours against the peer (above 1: ours better; log scale)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return True
