"""Prometheus, played by the suite: scraping workers on a tick, and promtool on the result.

A scenario scrapes its workers' ``/metrics`` every ``interval`` seconds, as a
Prometheus server would (``Scraper``), then asks promtool whether an alert
rule of ``docs/prometheus-alerts.yml`` fires at given ticks of those series
(``check_alert``): the rule's own expression, ``for:`` and labels, read
from the rules file, so no threshold is copied into a test. The rule's
annotations are left out (their text depends on the value; the rule tests
of ``tests/prometheus/alerts_test.yml`` check them).

promtool is Debian's ``prometheus`` package; without it the scenario skips,
or fails with ``DURABLE_JOBS_REQUIRE_PROMTOOL=1``, as the unit tests do.
"""

from __future__ import annotations

import json
import math
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.helpers import get
from tests.promtool import promtool

from .fleet import ROOT

RULES = ROOT / "docs" / "prometheus-alerts.yml"


def rule(alert: str) -> dict[str, Any]:
    """The rule named ``alert`` in the rules file, as written there."""
    for group in yaml.safe_load(RULES.read_text())["groups"]:
        for entry in group["rules"]:
            if entry.get("alert") == alert:
                return dict(entry)
    raise AssertionError(f"no rule {alert!r} in {RULES}")


def scrape(port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float] | None:
    """A worker's /metrics: ``{(name, labels): value}``; None when it does not answer 200."""
    status, text = get(port, "/metrics")
    if status != 200:
        return None
    return {
        (sample.name, frozenset(sample.labels.items())): float(sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


@dataclass
class Scraper:
    """Scrapes ``targets`` (instance -> metrics port) every ``interval`` seconds, on a
    fixed schedule from its first tick: tick ``k`` is at ``start + k * interval`` (late
    when a call between ticks ran long; a missed tick is a missing sample)."""

    targets: Mapping[str, int]
    interval: int
    #: Per tick: when it was taken (monotonic), and each instance's samples (None: no answer).
    ticks: list[tuple[float, dict[str, dict[Any, float] | None]]] = field(default_factory=list)
    start: float | None = None

    def tick(self) -> int:
        """Wait for the next tick, scrape every target; the tick's number."""
        if self.start is None:
            self.start = time.monotonic()
        due = self.start + len(self.ticks) * self.interval
        time.sleep(max(0.0, due - time.monotonic()))
        while time.monotonic() >= due + self.interval:  # running late: those ticks are missed
            self.ticks.append((due, dict.fromkeys(self.targets)))
            due += self.interval
        self.ticks.append((time.monotonic(), {i: scrape(p) for i, p in self.targets.items()}))
        return len(self.ticks) - 1

    def until(self, condition: Callable[[], bool], timeout: float, what: str) -> int:
        """Tick until ``condition()`` holds after a tick; the last tick's number."""
        deadline = time.monotonic() + timeout
        while True:
            last = self.tick()
            if condition():
                return last
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout} s waiting for {what}")

    def value(self, tick: int, instance: str, name: str, **labels: str) -> float | None:
        samples = self.ticks[tick][1][instance]
        return None if samples is None else samples.get((name, frozenset(labels.items())))

    def series(self, name: str, **labels: str) -> dict[str, list[float | None]]:
        """``name``'s values per tick, per instance: a selector (with ``instance``) each."""
        inner = "".join(f', {key}="{value}"' for key, value in sorted(labels.items()))
        return {
            f'{name}{{instance="{instance}"{inner}}}': [
                self.value(tick, instance, name, **labels) for tick in range(len(self.ticks))
            ]
            for instance in self.targets
        }

    def peak(self, name: str, ticks: range, **labels: str) -> float:
        values = [self.value(t, i, name, **labels) for t in ticks for i in self.targets]
        return max((v for v in values if v is not None), default=math.nan)


def check_alert(
    alert: str,
    series: Mapping[str, Sequence[float | None]],
    interval: int,
    fires_at: Mapping[int, bool],
    workdir: Path,
) -> None:
    """Assert, through ``promtool test rules``, that ``alert`` fires at the ticks of
    ``fires_at`` marked True and not at those marked False, given ``series`` sampled
    every ``interval`` seconds (tick ``k`` at ``k * interval`` s)."""
    result = _promtool_test(alert, series, interval, fires_at, workdir)
    assert result.returncode == 0, (
        f"{alert} did not fire as expected at ticks {dict(fires_at)} (every {interval} s):\n"
        f"{result.stdout}{result.stderr}\nseries: {dict(series)}"
    )


def first_firing(
    alert: str,
    series: Mapping[str, Sequence[float | None]],
    interval: int,
    ticks: range,
    workdir: Path,
) -> int | None:
    """The first of ``ticks`` at which ``alert`` fires, by promtool; None if none."""
    for tick in ticks:
        if _promtool_test(alert, series, interval, {tick: True}, workdir).returncode == 0:
            return tick
    return None


def _promtool_test(
    alert: str,
    series: Mapping[str, Sequence[float | None]],
    interval: int,
    fires_at: Mapping[int, bool],
    workdir: Path,
) -> subprocess.CompletedProcess[str]:
    entry = {key: value for key, value in rule(alert).items() if key != "annotations"}
    expected = [{"exp_labels": entry.get("labels", {})}]
    rules = workdir / "rules.yml"
    tests = workdir / "rules_test.yml"
    # JSON is YAML: no YAML writer needed.
    rules.write_text(json.dumps({"groups": [{"name": "under-test", "rules": [entry]}]}))
    case = {
        "interval": f"{interval}s",
        "input_series": [
            {"series": selector, "values": " ".join(_sample(v) for v in values)}
            for selector, values in series.items()
        ],
        "alert_rule_test": [
            {
                "eval_time": f"{tick * interval}s",
                "alertname": alert,
                "exp_alerts": expected if fires else [],
            }
            for tick, fires in sorted(fires_at.items())
        ],
    }
    tests.write_text(
        json.dumps(
            {"rule_files": [str(rules)], "evaluation_interval": f"{interval}s", "tests": [case]},
            indent=1,
        )
    )
    return subprocess.run(
        [promtool(), "test", "rules", str(tests)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _sample(value: float | None) -> str:
    """One value of promtool's series notation; ``_`` for a missing sample."""
    return "_" if value is None else repr(float(value))
