"""Fixtures of the unit tier (no database: pytest-django refuses its use here)."""

from __future__ import annotations

import pytest
from django.db import connections


@pytest.fixture(autouse=True)
def no_connection_left_open() -> None:
    """Each unit test starts as in a fresh process: no database connection open.

    pytest-xdist (``--dist worksteal``) may run a unit test in a process whose
    previous test, of another tier, left its connection open; code under test
    that calls Django's ``close_old_connections()`` (the executor does, per
    attempt) then checks that connection, which the unit tier's database
    blocker refuses: a failure that depends on the order tests ran in (CI).
    """
    for conn in connections.all(initialized_only=True):
        conn.close()
