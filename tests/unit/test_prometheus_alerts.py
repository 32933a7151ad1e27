"""docs/prometheus-alerts.yml loads in Prometheus, and each alert fires when it should only.

``promtool check rules`` parses the rules (PromQL included); ``promtool test rules``
runs tests/prometheus/alerts_test.yml, a case where each alert fires and cases where
it must not. promtool is Debian's ``prometheus`` package; without it these tests skip,
and with ``DURABLE_JOBS_REQUIRE_PROMTOOL=1`` (set by .ci/run once it installed the
package) they fail instead, so CI cannot pass by skipping.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.promtool import promtool as find_promtool

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "docs" / "prometheus-alerts.yml"
RULE_TESTS = ROOT / "tests" / "prometheus" / "alerts_test.yml"


@pytest.fixture(scope="module")
def promtool() -> str:
    return find_promtool()


def run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


def test_the_alert_rules_load(promtool: str) -> None:
    result = run(promtool, "check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    rules = len(re.findall(r"- alert: (\w+)", RULES.read_text()))
    assert rules >= 7 and f"SUCCESS: {rules} rules found" in result.stdout


def test_each_alert_fires_when_it_should_and_only_then(promtool: str) -> None:
    result = run(promtool, "test", "rules", str(RULE_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_rule_test() -> None:
    import re

    alerts = set(re.findall(r"- alert: (\w+)", RULES.read_text()))
    tested = set(re.findall(r"alertname: (\w+)", RULE_TESTS.read_text()))
    assert alerts and alerts == tested


def test_the_horizon_alert_and_the_doctor_share_a_threshold() -> None:
    """The alert fires when ``jobs doctor`` starts to ask for an operator, not later."""
    from django_durable_jobs.conf import SETTINGS

    rule = re.search(
        r"alert: DurableJobsVacuumHorizonHeld\n(?:.*\n)*?\s+expr: max\("
        r"durable_jobs_db_horizon_age_seconds\) > ([\d.]+)\n",
        RULES.read_text(),
    )
    assert rule is not None, "DurableJobsVacuumHorizonHeld's expr changed shape"
    assert float(rule.group(1)) == SETTINGS["HEALTH_HORIZON_AGE_SECONDS"].default
