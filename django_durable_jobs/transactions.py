"""Whose transaction the caller is in: its own, or only a test's.

Django's ``TestCase`` (and pytest-django's ``db`` fixture, built on it)
wraps each test in atomic blocks that never commit. Code that must wait for
"the caller's commit" (a suspension, the immediate mode's run) treats those
as no transaction at all: the test's data is the caller's data, already
there, and ``transaction.on_commit`` inside them would never fire.
"""

from __future__ import annotations

from typing import Any


def in_own_transaction(connection: Any) -> bool:
    """Inside a ``transaction.atomic()`` of the code's own, not only a test's.

    Django marks a ``TestCase``'s atomic blocks with ``_from_testcase`` (it
    lets ``atomic(durable=True)`` run inside them for the same reason).
    """
    return any(not getattr(block, "_from_testcase", False) for block in connection.atomic_blocks)
