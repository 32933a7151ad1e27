"""The worker's signal handler (worker/stopping.py): first signal graceful, a second one
forced, and a second one within SAME_PRESS_SECONDS of the first the same press."""

from __future__ import annotations

import logging
import signal

import pytest

from django_durable_jobs.worker.stopping import SAME_PRESS_SECONDS, signal_handler


class Recorder:
    def __init__(self) -> None:
        self.calls: list[str] = []
        self.now = 100.0

    def handler(self):  # type: ignore[no-untyped-def]
        return signal_handler(
            stopping=lambda: "stop" in self.calls,
            stop=lambda: self.calls.append("stop"),
            force_exit=lambda: self.calls.append("force"),
            grace_period=30.0,
            clock=lambda: self.now,
        )


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_second_signal_within_the_window_is_the_same_press(
    signum: int, caplog: pytest.LogCaptureFixture
) -> None:
    rec = Recorder()
    handle = rec.handler()
    handle(signum, None)
    rec.now += SAME_PRESS_SECONDS / 10  # the terminal's copy, forwarded by a wrapper
    with caplog.at_level(logging.INFO, logger="django_durable_jobs.worker"):
        handle(signum, None)
    assert rec.calls == ["stop"]
    assert "the same press" in caplog.text


def test_a_second_signal_after_the_window_exits_at_once() -> None:
    rec = Recorder()
    handle = rec.handler()
    handle(signal.SIGINT, None)
    rec.now += SAME_PRESS_SECONDS / 10
    handle(signal.SIGINT, None)  # the same press
    rec.now += SAME_PRESS_SECONDS
    handle(signal.SIGINT, None)  # a second press
    assert rec.calls == ["stop", "force"]


def test_a_signal_during_a_stop_asked_for_otherwise_exits_at_once() -> None:
    rec = Recorder()
    rec.calls.append("stop")  # stopping already (a burst's end, a recycle): no window
    rec.handler()(signal.SIGTERM, None)
    assert rec.calls == ["stop", "force"]


@pytest.mark.parametrize("nested_at", ["stopping", "stop"])
def test_a_copy_that_interrupts_the_first_handler_is_still_the_same_press(nested_at: str) -> None:
    # Python runs a handler between two bytecodes, those of a running handler included:
    # a press's two SIGINTs nest. Whichever records itself first is the first press.
    calls: list[str] = []
    nested: list[bool] = []

    def interrupt_once() -> None:
        if not nested:
            nested.append(True)
            handle(signal.SIGINT, None)

    def stopping() -> bool:
        if nested_at == "stopping":
            interrupt_once()
        return "stop" in calls

    def stop() -> None:
        if nested_at == "stop":
            interrupt_once()
        calls.append("stop")

    handle = signal_handler(
        stopping=stopping,
        stop=stop,
        force_exit=lambda: calls.append("force"),
        grace_period=30.0,
        clock=lambda: 100.0,
    )
    handle(signal.SIGINT, None)
    assert nested == [True]
    assert calls == ["stop"]
