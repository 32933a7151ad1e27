"""Where a handler is now, for the error history of an attempt the worker took from it.

A sync handler is its slot thread's stack. An ``async def`` handler is
its task's chain of awaits: the slot thread only waits for it (see
``event_loop.py``), and the event loop's thread runs every async handler
in turn. While the loop thread runs the handler's code right now (a
blocking call in a coroutine, which stalls every async handler of the
worker), the loop thread's stack says more: it shows the blocking call.

Read from another thread (the watchdog's) without stopping the handler:
best effort, never raising. A frame may move on while it is formatted;
the text is then a moment out of date, which is all an error entry needs.
"""

from __future__ import annotations

import sys
import traceback
from types import FrameType
from typing import Any

#: Deepest stack of a handler kept in an error entry.
STACK_LIMIT = 30


def thread_stack(thread_id: int | None) -> str:
    """Where thread ``thread_id`` is now ("" if it is gone)."""
    frame = None if thread_id is None else sys._current_frames().get(thread_id)
    if frame is None:
        return ""
    return "".join(traceback.format_stack(frame, limit=STACK_LIMIT))


def coroutine_stack(coro: object, loop_thread_id: int | None) -> str:
    """Where the coroutine (or generator) ``coro`` is now: its chain of awaits, outermost first.

    The loop thread's stack instead when one of the chain's coroutines is
    running (the loop is inside the handler's code, not waiting for it).
    """
    frames: list[FrameType] = []
    running = False
    current: Any = coro
    try:
        while current is not None and len(frames) < STACK_LIMIT:
            frame = getattr(current, "cr_frame", None) or getattr(current, "gi_frame", None)
            if frame is None:
                break  # a Future, or a finished coroutine: the chain ends here
            running = running or bool(
                getattr(current, "cr_running", False) or getattr(current, "gi_running", False)
            )
            frames.append(frame)
            current = getattr(current, "cr_await", None) or getattr(current, "gi_yieldfrom", None)
        if running:
            return thread_stack(loop_thread_id)
        summary = traceback.StackSummary.extract((f, f.f_lineno) for f in frames)
        return "".join(summary.format())
    except Exception:  # a frame that moved on under us: no stack rather than no outcome
        return ""
