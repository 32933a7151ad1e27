"""``--cpu-durations=N``: the N tests that cost the most CPU, as ``--durations`` lists wall time.

CI runs five lanes on two cores: it is bound by CPU, not by any test's wall
time, and a test that waits 60 s on a worker costs less than one that
computes for 10. This counts, for each test (setup, call and teardown), the
CPU of the pytest process (every thread: the live server's, the test's
workers') and of the child processes it reaped in that time (the e2e tier's
``runjobworker`` processes, the CLI's). PostgreSQL's backends are not in it.
With xdist, each worker measures its own tests and the controller prints.
"""

from __future__ import annotations

import resource
import time
from collections.abc import Iterator
from typing import Any

import pytest

_KEY = "cpu_seconds"
_started = pytest.StashKey[float]()


def _cpu_now() -> float:
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("terminal reporting").addoption(
        "--cpu-durations",
        type=int,
        default=0,
        metavar="N",
        help="show the N tests that used the most CPU, child processes included (0: none)",
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    item.stash[_started] = _cpu_now()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    yield
    started = item.stash.get(_started, None)
    if started is not None:
        # Carried by the teardown report, through xdist, to the controller.
        item.user_properties.append((_KEY, round(_cpu_now() - started, 3)))


class _Collector:
    def __init__(self, count: int) -> None:
        self.count = count
        self.seconds: dict[str, float] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "teardown":
            return
        for key, value in report.user_properties:
            if key == _KEY:
                # schemathesis gives each operation's test the same node id: add them up.
                self.seconds[report.nodeid] = self.seconds.get(report.nodeid, 0.0) + float(value)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.seconds:
            return
        total = sum(self.seconds.values())
        terminalreporter.write_sep("=", f"most CPU: {self.count} of {len(self.seconds)} tests")
        ranked = sorted(self.seconds.items(), key=lambda kv: kv[1], reverse=True)
        for nodeid, seconds in ranked[: self.count]:
            terminalreporter.write_line(f"{seconds:7.2f}s cpu  {nodeid}")
        terminalreporter.write_line(f"{total:7.2f}s cpu  in all (PostgreSQL's not counted)")
        # Per file too: a file's many cheap tests can cost more than its one slow test.
        files: dict[str, float] = {}
        for nodeid, seconds in self.seconds.items():
            path = nodeid.split("::", 1)[0]
            files[path] = files.get(path, 0.0) + seconds
        terminalreporter.write_sep("-", f"most CPU by file: {self.count} of {len(files)}")
        for path, seconds in sorted(files.items(), key=lambda kv: kv[1], reverse=True)[
            : self.count
        ]:
            terminalreporter.write_line(f"{seconds:7.2f}s cpu  {path}")


def pytest_configure(config: pytest.Config) -> None:
    count = config.getoption("cpu_durations", 0)
    # Under xdist, only the controller prints (each worker measures and reports).
    if count and not hasattr(config, "workerinput"):
        config.pluginmanager.register(_Collector(count), "cpu-durations-collector")
