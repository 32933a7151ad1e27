"""The queue on a database of its own, for the whole test suite (``DURABLE_JOBS["DATABASE"]``).

With ``DURABLE_JOBS_TEST_QUEUE_DATABASE=1`` (tox's ``queuedb`` environment,
docs/development.md), the test settings put the queue on a second alias,
``"queue"``: a database of its own on the same server (``QUEUE_DATABASE_URL``,
else ``DATABASE_URL``'s name with ``_queue`` appended), so pytest-django
creates ``test_<name>_queue`` beside ``test_<name>``, migrates the job
tables into it only (``QueueRouter``), and every test that uses the database
may use both aliases. The e2e tier's processes get both URLs.

Tests override ``DURABLE_JOBS`` whole (``override_settings(DURABLE_JOBS=...)``);
in this mode, ``keep_the_queue_database`` adds ``"DATABASE": "queue"`` to
each such override that names no database, so the queue never moves back to
"default" halfway through a test.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping
from typing import Any

ENV = "DURABLE_JOBS_TEST_QUEUE_DATABASE"
ALIAS = "queue"
ROUTER = "django_durable_jobs.routers.QueueRouter"
#: The mode's second router: nothing but the job tables on the queue's database.
ONLY_THE_QUEUE = "tests.queue_database.OnlyTheQueueThere"


def enabled() -> bool:
    """Whether this run puts the queue on its own database."""
    return os.environ.get(ENV) == "1"


def add_alias(databases: MutableMapping[str, Any]) -> None:
    """The ``queue`` alias: a database of its own, beside the default one.

    The example project adds it itself when ``QUEUE_DATABASE_URL`` is set;
    else it is the default database's settings with ``_queue`` appended to
    the name. Always there in the test settings: without the mode, only the
    tests that ask for it (tests/integration/test_queue_database.py) get its
    test database, with every app's tables, since no router says otherwise.
    """
    if ALIAS not in databases:
        default = databases["default"]
        databases[ALIAS] = {**default, "NAME": f"{default['NAME']}_queue"}


def configure(namespace: MutableMapping[str, Any]) -> None:
    """Put the queue on the ``queue`` alias in a settings module's globals (the mode)."""
    add_alias(namespace["DATABASES"])
    namespace["DURABLE_JOBS"] = {**namespace.get("DURABLE_JOBS", {}), "DATABASE": ALIAS}
    routers = [
        r for r in namespace.get("DATABASE_ROUTERS", []) if r not in (ROUTER, ONLY_THE_QUEUE)
    ]
    namespace["DATABASE_ROUTERS"] = [ROUTER, ONLY_THE_QUEUE, *routers]
    silenced = list(namespace.get("SILENCED_SYSTEM_CHECKS", []))
    if "durable_jobs.W014" not in silenced:
        namespace["SILENCED_SYSTEM_CHECKS"] = [*silenced, "durable_jobs.W014"]


class OnlyTheQueueThere:
    """The mode's queue database holds the job tables and no other app's.

    ``QueueRouter`` has no opinion on the other apps (a project's routers
    decide), and Django's default migrates every app everywhere: the queue's
    test database would get empty copies of auth's and the test app's tables,
    which a query sent there by mistake (a subquery of a job query, say)
    reads without an error. Without them the mistake fails loudly.
    """

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool | None:
        if db == ALIAS and app_label != "durable_jobs":
            return False
        return None


def keep_the_queue_database(*, setting: str, value: Any, enter: bool, **kwargs: Any) -> None:
    """A ``setting_changed`` receiver: an overriding ``DURABLE_JOBS`` keeps ``DATABASE``."""
    if setting != "DURABLE_JOBS" or not enter or not isinstance(value, Mapping):
        return
    if "DATABASE" in value:
        return
    from django.conf import settings

    # override_settings has made settings._wrapped a holder of its own, which
    # this assignment writes to (dropping LazySettings' cached value); the
    # caller's dict, often a shared constant, is left alone. Leaving the
    # override restores the holder before it.
    settings.DURABLE_JOBS = {**value, "DATABASE": ALIAS}


def install() -> None:
    """Connect ``keep_the_queue_database`` (the test process only; once)."""
    from django.test.signals import setting_changed

    setting_changed.connect(keep_the_queue_database, dispatch_uid=__name__)


def not_in_this_mode(reason: str) -> Any:
    """A ``skipif`` for a test that cannot apply with the queue on its own database.

    For what only one database gives: the job and the application's rows in
    one transaction (docs/guides/queue-database.md). ``reason`` says which.
    """
    import pytest

    return pytest.mark.skipif(enabled(), reason=f"queue on its own database: {reason}")
