"""Counts of what the fuzz tests sent, printed at the end of the run."""

from __future__ import annotations

from collections import Counter
from typing import Any

#: Requests the schemathesis tests sent: ``parametrized`` (one operation at a
#: time), ``stateful`` (steps of scenarios), ``scenarios``, and the stateful
#: answers by operation and status (``"POST /api/jobs/{id}/requeue/ 200"``).
api_requests: Counter[str] = Counter()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not api_requests:
        return
    terminalreporter.write_line(
        f"schemathesis: {api_requests['parametrized']} requests one operation at a time, "
        f"{api_requests['stateful']} in {api_requests['scenarios']} stateful scenarios"
    )
    # Which calls the stateful scenarios reached, and how they answered.
    answers = sorted(
        (key, n) for key, n in api_requests.items() if key.startswith(("GET ", "POST "))
    )
    if answers:
        terminalreporter.write_line(
            "schemathesis stateful answers: " + ", ".join(f"{key} x{n}" for key, n in answers)
        )
