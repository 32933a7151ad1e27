"""What the chaos suite's fixtures hand the scenarios: the mode, a database, process settings."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Any

import pytest
from django.db import connections

from .cluster import APP_ROLE, SUPERUSER, Cluster
from .fleet import ROOT

#: CHAOS=short (the default, CI) or CHAOS=long (on demand).
MODES = ("short", "long")
TEMPLATE = "chaos_template"


@dataclass(frozen=True)
class Mode:
    name: str

    @property
    def long(self) -> bool:
        return self.name == "long"

    def pick(self, short: Any, long: Any) -> Any:
        """The short mode's value or the long mode's."""
        return long if self.long else short


def chaos_mode() -> Mode:
    name = os.environ.get("CHAOS", "short") or "short"
    if name not in MODES:
        raise pytest.UsageError(f"CHAOS={name!r}: expected one of {', '.join(MODES)}")
    return Mode(name)


def process_env(database_url: str, **extra: str) -> dict[str, str]:
    """The environment of the suite's processes (workers, the web server, migrate)."""
    return {
        **os.environ,
        "DATABASE_URL": database_url,
        "DJANGO_SETTINGS_MODULE": "tests.chaos.settings",
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "example_project")]),
        **extra,
    }


class Database:
    """A scenario's own database on the cluster, and this process's Django alias for it.

    The alias connects as the superuser, so the test can still look (and
    let go) while the workers' role finds the server full.
    """

    def __init__(self, cluster: Cluster, name: str) -> None:
        self.cluster = cluster
        self.name = name
        self.alias = name
        #: What the workers and the web server get: the unprivileged role.
        self.url = cluster.url(name)
        self.socket_url = cluster.url(name, socket=True)

    def create(self) -> None:
        with self.cluster.admin() as conn:
            conn.execute(f"CREATE DATABASE {self.name} TEMPLATE {TEMPLATE} OWNER {APP_ROLE}")
        config = {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": self.name,
            "USER": SUPERUSER,
            "PASSWORD": "",
            "HOST": "127.0.0.1",
            "PORT": str(self.cluster.port),
            "OPTIONS": {"connect_timeout": 10},
        }
        connections.settings[self.alias] = connections.configure_settings({"default": config})[
            "default"
        ]

    def drop(self) -> None:
        """Close and forget this process's alias; drop the database (its workers are gone)."""
        connections.close_all()
        with contextlib.suppress(AttributeError):  # never connected in this thread
            del connections[self.alias]
        connections.settings.pop(self.alias, None)
        with self.cluster.admin() as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {self.name} WITH (FORCE)")
