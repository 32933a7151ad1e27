from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from django_durable_jobs.registry import registry

if TYPE_CHECKING:
    from tests.factories import Api

# A user's project, with its own settings and pytest.ini: its tests run in a
# process of their own (tests/e2e/test_userproject.py), never in this one.
collect_ignore = ["userproject"]

# --cpu-durations=N: what CI, bound by CPU, should cut first (tests/cpu_durations.py).
pytest_plugins = ["tests.cpu_durations"]


@pytest.fixture
def clean_registry() -> Iterator[None]:
    """Let a test register handlers without leaking them into other tests."""
    saved = dict(registry._handlers)
    try:
        yield
    finally:
        registry._handlers.clear()
        registry._handlers.update(saved)


@pytest.fixture
def staff() -> Api:
    """A REST client of an operator: a user holding every job permission.

    The name is older than the permissions: ``is_staff`` alone grants nothing
    at the REST door; the user holds ``tests.factories.OPERATOR_PERMISSIONS``.
    """
    from tests.factories import Api, make_operator

    return Api(make_operator("staff"))


@pytest.fixture(autouse=True)
def fresh_cache() -> Iterator[None]:
    """Empty Django's cache after each test.

    The REST API counts failed authentications there, per client address
    (``API_FAILED_AUTH_RATE``); the test client's address is always
    127.0.0.1, so one test's wrong passwords would otherwise refuse the next
    test's requests with 429.
    """
    from django.core.cache import caches

    yield
    for cache in caches.all(initialized_only=True):
        cache.clear()


@pytest.fixture(autouse=True)
def fresh_wait_listeners() -> Iterator[None]:
    """Close the test's ``wait()`` listeners (and their LISTEN connections) after it.

    The next test starts without one, so what it counts (connections,
    waiters) is its own, and no connection outlives the test database.
    """
    from django_durable_jobs.waiting.listener import close_listeners

    yield
    close_listeners()


# Hypothesis (tests/fuzz/): a profile of few examples for every run and for
# CI, a long one on demand (HYPOTHESIS_PROFILE=long; docs/development.md).
# No deadline: this machine is shared, and a slow example is not a failure.
# No example database: a run's failures are printed (print_blob), and no
# .hypothesis/ directory appears in the checkout.
def _hypothesis_profiles() -> None:
    import os

    from hypothesis import HealthCheck, settings

    common = {
        "deadline": None,
        "database": None,
        "print_blob": True,
        # Examples share the test's database fixture (each rolls back its own rows).
        "suppress_health_check": [HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    }
    # CI (and `./dev test`): a run of minutes; `long` for a deeper search (docs/development.md).
    settings.register_profile("ci", max_examples=40, **common)
    settings.register_profile("long", max_examples=3000, **common)
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


_hypothesis_profiles()


#: A UUID in a parameter's id: some tests parametrize over fresh uuid4()s.
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.I)
_UUID_HEX = re.compile(r"[0-9a-f]{32}", re.I)


def pytest_make_parametrize_id(config: pytest.Config, val: object, argname: str) -> str | None:
    """Stable test ids for parameters holding a random UUID.

    pytest-xdist requires each worker to collect the same test ids; an id
    made from a fresh ``uuid4()`` differs from process to process.
    """
    if isinstance(val, uuid.UUID):
        return "UUID"
    if isinstance(val, str) and _UUID_HEX.fullmatch(val):
        return "UUID"
    if isinstance(val, str) and _UUID.search(val):
        return _UUID.sub("UUID", val)
    return None


def pytest_configure(config: pytest.Config) -> None:
    # Transactional tests reset the database with DELETE instead of TRUNCATE (tests/reset.py):
    # the per-test TRUNCATE was the largest single cost of the suite. TEST_FLUSH=truncate
    # keeps Django's own reset (to tell whether a failure has to do with it).
    import os

    from tests import reset

    if os.environ.get("TEST_FLUSH") != "truncate":
        reset.install()


#: The fixtures that give a test the database (pytest-django's, and the e2e tier's ``manage``).
_DB_FIXTURES = ("db", "transactional_db", "live_server", "django_db_reset_sequences")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With the queue on its own database, every database test may use both aliases.

    pytest-django lets a test query "default" only unless its marker names
    more; it also creates only the test databases that the collected tests
    name. A marker of the test's own, with the queue alias added, does both.
    """
    from tests import queue_database

    if not queue_database.enabled():
        return
    from pytest_django.fixtures import validate_django_db

    queue_database.install()
    for item in items:
        _add_the_queue_to_a_test_case(item)
        marker = item.get_closest_marker("django_db")
        if marker is None and not any(f in getattr(item, "fixturenames", ()) for f in _DB_FIXTURES):
            continue
        kwargs = dict(marker.kwargs) if marker is not None else {}
        databases = validate_django_db(marker)[2] if marker is not None else None
        if databases == "__all__":
            continue
        kwargs["databases"] = sorted({*(databases or ("default",)), queue_database.ALIAS})
        item.add_marker(
            pytest.mark.django_db(*(marker.args if marker else ()), **kwargs), append=False
        )


def _add_the_queue_to_a_test_case(item: pytest.Item) -> None:
    """A Django ``TestCase`` (unittest style) names its databases in ``databases``, not a marker.

    pytest-django reads the class's attribute: the queue alias is added there,
    so the class's transactions (and checks of the queries allowed) cover both.
    """
    from django.test import TransactionTestCase

    from tests import queue_database

    cls = getattr(item, "cls", None)
    if cls is None or not issubclass(cls, TransactionTestCase) or cls.databases == "__all__":
        return
    if queue_database.ALIAS not in cls.databases:
        cls.databases = {*cls.databases, queue_database.ALIAS}
