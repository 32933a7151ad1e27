"""The pytest plugin of ``django_durable_jobs.testing`` (registered as ``pytest11``).

One fixture, ``durable_jobs``: the testing helpers, on the test's database::

    def test_signup_sends_the_welcome_email(client, durable_jobs):
        client.post("/signup/", {"email": "ada@example.com"})
        durable_jobs.assert_enqueued(type="emails.welcome", payload={"to": "ada@example.com"})
        (ran,) = durable_jobs.run()
        assert ran.status == "completed"

It asks for pytest-django's ``db`` fixture (the test's transaction, as
``TestCase``), unless the test asked for ``transactional_db``. Nothing here
imports Django until a test uses the fixture: pytest loads plugins before
Django is set up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from django_durable_jobs.models import Job
    from django_durable_jobs.testing import RanJob


class DurableJobs:
    """``django_durable_jobs.testing``'s helpers, bound to one database alias."""

    def __init__(self, using: str | None = None) -> None:
        self.using = using

    def enqueued(self, **lookups: Any) -> list[Job]:
        from django_durable_jobs import testing

        return testing.enqueued_jobs(using=self.using, **lookups)

    def assert_enqueued(self, **lookups: Any) -> list[Job]:
        from django_durable_jobs import testing

        return testing.assert_enqueued(using=self.using, **lookups)

    def assert_not_enqueued(self, **lookups: Any) -> None:
        from django_durable_jobs import testing

        testing.assert_not_enqueued(using=self.using, **lookups)

    def run(
        self, queue: str | None = None, type: str | None = None, **options: Any
    ) -> list[RanJob]:
        from django_durable_jobs import testing

        return testing.run_jobs(queue, type, using=self.using, **options)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the tests that use ``durable_jobs`` (and no ``django_db`` mark) as database tests.

    pytest-django creates the test databases that the collected tests ask
    for, by their marks and the fixture names they list; ``db``, which the
    fixture asks for while it is set up, is not one of those names. A run
    whose only database tests use ``durable_jobs`` would have no database.
    First, so that pytest-django's ordering of database tests sees the mark.
    """
    if not config.pluginmanager.hasplugin("django"):
        return
    for item in items:
        names = getattr(item, "fixturenames", ())
        if "durable_jobs" in names and item.get_closest_marker("django_db") is None:
            item.add_marker(pytest.mark.django_db(transaction="transactional_db" in names))


@pytest.fixture
def durable_jobs(request: pytest.FixtureRequest) -> DurableJobs:
    """The testing helpers (``django_durable_jobs.testing``) on the test's database."""
    if "transactional_db" not in request.fixturenames and request.config.pluginmanager.hasplugin(
        "django"
    ):
        request.getfixturevalue("db")
    return DurableJobs()
