"""Moved: the watchdog is ``worker/watchdog.py``, attempt states ``worker/attempts.py``."""

from __future__ import annotations

from .watchdog import STACK_LIMIT, Watchdog, effective_timeout, thread_stack

__all__ = ["STACK_LIMIT", "Watchdog", "effective_timeout", "thread_stack"]
