"""System checks: the queue's configuration is verified at startup."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.core import checks
from django.db import connections, router

from .conf import SETTINGS, SETTINGS_NAME
from .flow import FlowError, parse_queues
from .handlers import registry
from .models import Job
from .schedules import load_schedules

E001 = (
    "django-durable-jobs needs PostgreSQL, but the job table's database {alias!r} "
    "uses the {vendor!r} backend."
)
E001_HINT = (
    "Point DATABASES[{alias!r}] at PostgreSQL (ENGINE 'django.db.backends.postgresql'), "
    "or route the durable_jobs app to a PostgreSQL database with a database router."
)
E002 = "{name}[{key!r}] is not a known setting."
E003 = "{name}[{key!r}] must be {expected}, got {value!r}."
E004 = "{name} must be a dict, got {kind}."
E005 = "django-durable-jobs needs psycopg 3; database {alias!r} uses psycopg2."


def _user_setting(key: str) -> Any:
    """``DURABLE_JOBS[key]`` as the user wrote it, or None (a non-dict is E004's)."""
    user = getattr(settings, SETTINGS_NAME, None)
    return user.get(key) if isinstance(user, Mapping) else None


@checks.register(checks.Tags.compatibility)
def check_database(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """E001: the job table's database must be PostgreSQL (checked without connecting)."""
    errors: list[checks.CheckMessage] = []
    from . import db

    configured = SETTINGS["DATABASE"].is_valid(_user_setting("DATABASE"))
    aliases = {router.db_for_write(Job) or "default", router.db_for_read(Job) or "default"}
    if configured:
        aliases.add(db.database_alias())
    for alias in sorted(aliases):
        if alias not in connections.settings:
            continue  # Django reports unknown aliases itself.
        connection = connections[alias]
        if connection.vendor != "postgresql":
            errors.append(
                checks.Error(
                    E001.format(alias=alias, vendor=connection.vendor),
                    hint=E001_HINT.format(alias=alias),
                    obj=Job,
                    id="durable_jobs.E001",
                )
            )
            continue
        from django.db.backends.postgresql.psycopg_any import is_psycopg3

        if not is_psycopg3:
            errors.append(
                checks.Error(
                    E005.format(alias=alias),
                    hint="pip install 'psycopg[binary]>=3.2' (or 'psycopg[c]').",
                    id="durable_jobs.E005",
                )
            )
    return errors


@checks.register(checks.Tags.compatibility)
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """E002/E003/E004: every ``DURABLE_JOBS`` key is known and well-typed."""
    user = getattr(settings, SETTINGS_NAME, None)
    if user is None:
        return []
    if not isinstance(user, Mapping):
        return [
            checks.Error(
                E004.format(name=SETTINGS_NAME, kind=type(user).__name__),
                id="durable_jobs.E004",
            )
        ]
    errors: list[checks.CheckMessage] = []
    for key, value in user.items():
        spec = SETTINGS.get(key)
        if spec is None:
            errors.append(
                checks.Error(
                    E002.format(name=SETTINGS_NAME, key=key),
                    hint="Known settings: " + ", ".join(sorted(SETTINGS)) + ".",
                    id="durable_jobs.E002",
                )
            )
        elif not spec.is_valid(value):
            errors.append(
                checks.Error(
                    E003.format(name=SETTINGS_NAME, key=key, expected=spec.expected, value=value),
                    id="durable_jobs.E003",
                )
            )
    return errors


E006 = "Schedule {name!r} enqueues job type {type!r}, but no handler is registered for it."
E006_HINT = (
    "Declare the handler with @job({type!r}) in an installed app's jobs module, or fix the "
    "schedule's 'type'. If the handler runs in another codebase, silence durable_jobs.E006."
)
E007_HINT = "See docs/guides/periodic-jobs.md for the schedule options."
E007_USE_TZ = (
    "Periodic jobs need USE_TZ = True: ticks are instants in UTC, but {count} schedule(s) "
    "are declared with USE_TZ = False."
)


@checks.register(checks.Tags.compatibility)
def check_schedules(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """E006/E007: every declared schedule is valid and has a handler to run its jobs."""
    user = getattr(settings, SETTINGS_NAME, None)
    if user is not None and not isinstance(user, Mapping):
        return []  # E004 reports it.
    if user and "SCHEDULES" in user and not SETTINGS["SCHEDULES"].is_valid(user["SCHEDULES"]):
        return []  # E003 reports it; the entries cannot be read.
    schedules, invalid = load_schedules()
    errors: list[checks.CheckMessage] = [
        checks.Error(str(error), hint=E007_HINT, id="durable_jobs.E007") for error in invalid
    ]
    if schedules and not settings.USE_TZ:
        errors.append(
            checks.Error(
                E007_USE_TZ.format(count=len(schedules)), hint=E007_HINT, id="durable_jobs.E007"
            )
        )
    for schedule in schedules:
        if schedule.type not in registry:
            errors.append(
                checks.Error(
                    E006.format(name=schedule.name, type=schedule.type),
                    hint=E006_HINT.format(type=schedule.type),
                    id="durable_jobs.E006",
                )
            )
    return errors


E008_HINT = "See docs/guides/flow-control.md for the QUEUES options."


@checks.register(checks.Tags.compatibility)
def check_queue_limits(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """E008: every ``QUEUES`` entry reads as limits a worker can enforce."""
    user = getattr(settings, SETTINGS_NAME, None)
    if not isinstance(user, Mapping) or "QUEUES" not in user:
        return []
    if not SETTINGS["QUEUES"].is_valid(user["QUEUES"]):
        return []  # E003 reports it; the entries cannot be read.
    try:
        parse_queues(user["QUEUES"])
    except FlowError as exc:
        return [checks.Error(str(exc), hint=E008_HINT, id="durable_jobs.E008")]
    return []


E009_UNKNOWN = "{name}['LISTEN_DATABASE'] is {alias!r}, which is not in DATABASES."
E009_NOT_POSTGRESQL = (
    "{name}['LISTEN_DATABASE'] is {alias!r}, whose backend is {vendor!r}: LISTEN needs PostgreSQL."
)
E009_HINT = (
    "Add DATABASES[{alias!r}]: a direct connection (not through a transaction pooler) to "
    "the PostgreSQL database of the job table. Or remove LISTEN_DATABASE to LISTEN on the "
    "job database's own connection. See docs/guides/poolers.md."
)


@checks.register(checks.Tags.compatibility)
def check_listen_database(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """E009: ``LISTEN_DATABASE`` names a PostgreSQL database of ``DATABASES`` (no connection)."""
    user = getattr(settings, SETTINGS_NAME, None)
    if not isinstance(user, Mapping) or user.get("LISTEN_DATABASE") is None:
        return []
    alias = user["LISTEN_DATABASE"]
    if not SETTINGS["LISTEN_DATABASE"].is_valid(alias):
        return []  # E003 reports it.
    hint = E009_HINT.format(alias=alias)
    if alias not in connections.settings:
        return [
            checks.Error(
                E009_UNKNOWN.format(name=SETTINGS_NAME, alias=alias),
                hint=hint,
                id="durable_jobs.E009",
            )
        ]
    vendor = connections[alias].vendor
    if vendor != "postgresql":
        return [
            checks.Error(
                E009_NOT_POSTGRESQL.format(name=SETTINGS_NAME, alias=alias, vendor=vendor),
                hint=hint,
                id="durable_jobs.E009",
            )
        ]
    return []


E010_OWN_TYPE = (
    "{name}['API_ENQUEUE_TYPES'] lists {type!r}, one of the package's own job types: "
    "REST callers may never enqueue those."
)
E010_BAD_NAME = "{name}[{key!r}] lists {value!r}: {message}"
E010_HINT = (
    "API_ENQUEUE_TYPES and API_ENQUEUE_QUEUES say what a REST client holding add_job may "
    "enqueue. Leave them unset (None) for the safe default: registered handlers not declared "
    "with a schedule, into declared queues (docs/explanation/security.md)."
)
W011_UNREGISTERED = (
    "{name}['API_ENQUEUE_TYPES'] lists {type!r}, for which no handler is registered: "
    "REST callers cannot enqueue it while API_ALLOW_UNREGISTERED_TYPES is False."
)
W011_HINT = "Register a handler for it with @job, or remove it from API_ENQUEUE_TYPES."


@checks.register(checks.Tags.compatibility)
def check_rest_enqueue_policy(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """E010/W011: what REST callers may enqueue names real types and valid queues.

    The package's own types (``durable_jobs.*``, bulk runs) can never be
    allowed: a client that may enqueue would cancel every pending job.
    """
    from .exceptions import InvalidJob
    from .names import OWN_TYPE_PREFIX, validate_queue, validate_type

    user = getattr(settings, SETTINGS_NAME, None)
    if not isinstance(user, Mapping):
        return []
    messages: list[checks.CheckMessage] = []
    types = user.get("API_ENQUEUE_TYPES")
    if types is not None and SETTINGS["API_ENQUEUE_TYPES"].is_valid(types):
        allow_unregistered = user.get("API_ALLOW_UNREGISTERED_TYPES") is True
        for name in sorted(types):
            pattern = name.endswith(".*")
            try:
                validate_type(name[:-2] if pattern else name)
            except InvalidJob as exc:
                messages.append(
                    checks.Error(
                        E010_BAD_NAME.format(
                            name=SETTINGS_NAME, key="API_ENQUEUE_TYPES", value=name, message=exc
                        ),
                        hint=E010_HINT,
                        id="durable_jobs.E010",
                    )
                )
                continue
            # durable_jobs.bulk_cancel, durable_jobs.*, or a wider pattern (durable_j.*)
            wider = pattern and OWN_TYPE_PREFIX.startswith(name[:-1])
            if name.startswith(OWN_TYPE_PREFIX) or wider:
                messages.append(
                    checks.Error(
                        E010_OWN_TYPE.format(name=SETTINGS_NAME, type=name),
                        hint=E010_HINT,
                        id="durable_jobs.E010",
                    )
                )
            elif not pattern and not allow_unregistered and name not in registry:
                messages.append(
                    checks.Warning(
                        W011_UNREGISTERED.format(name=SETTINGS_NAME, type=name),
                        hint=W011_HINT,
                        id="durable_jobs.W011",
                    )
                )
    queues = user.get("API_ENQUEUE_QUEUES")
    if queues is not None and SETTINGS["API_ENQUEUE_QUEUES"].is_valid(queues):
        for name in sorted(queues):
            try:
                validate_queue(name)
            except InvalidJob as exc:
                messages.append(
                    checks.Error(
                        E010_BAD_NAME.format(
                            name=SETTINGS_NAME, key="API_ENQUEUE_QUEUES", value=name, message=exc
                        ),
                        hint=E010_HINT,
                        id="durable_jobs.E010",
                    )
                )
    return messages


W012 = (
    "{name}['RUN_IMMEDIATELY'] is True outside a test run, with DEBUG off: every job runs in "
    "the process that enqueues it (a web request, a worker's handler or scheduler), not in a "
    "worker."
)
W012_HINT = (
    "The immediate mode is for tests: set it in your test settings only, or with "
    "override_settings in the tests that want it. See docs/guides/testing.md."
)


@checks.register(checks.Tags.compatibility)
def check_immediate_mode(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """W012: ``RUN_IMMEDIATELY`` is for tests; on with ``DEBUG`` off outside one, say so.

    Django's test runner and pytest-django turn ``DEBUG`` off and run the
    checks in the test environment, where ``mail.outbox`` exists (Django
    sets it up for the test run and removes it after): no warning there.
    """
    from django.core import mail

    user = getattr(settings, SETTINGS_NAME, None)
    if not isinstance(user, Mapping) or user.get("RUN_IMMEDIATELY") is not True:
        return []
    if settings.DEBUG or hasattr(mail, "outbox"):
        return []
    return [checks.Warning(W012.format(name=SETTINGS_NAME), hint=W012_HINT, id="durable_jobs.W012")]


ROUTER_PATH = "django_durable_jobs.routers.QueueRouter"
E013_UNKNOWN = "{name}['DATABASE'] is {alias!r}, which is not in DATABASES."
E013_UNKNOWN_HINT = (
    "Add DATABASES[{alias!r}], the PostgreSQL database the queue lives in, or remove "
    "DATABASE to keep the queue where the routers put it (else 'default'). See "
    "docs/guides/queue-database.md."
)
E013_NOT_ROUTED = (
    "{name}['DATABASE'] is {alias!r}, but the database routers send the job models' "
    "{what} to {routed!r}."
)
E013_MIGRATES_ELSEWHERE = (
    "{name}['DATABASE'] is {alias!r}, but the database routers let migrate create the job "
    "tables in {others} too."
)
E013_NO_MIGRATE = (
    "{name}['DATABASE'] is {alias!r}, but the database routers do not let migrate create "
    "the job tables there."
)
E013_ROUTER_HINT = (
    "Add the package's router, before your own: "
    "DATABASE_ROUTERS = [" + repr(ROUTER_PATH) + ", ...]. See docs/guides/queue-database.md."
)
W014 = (
    "The queue's database is {alias!r}, not 'default': enqueue() is then NOT in the "
    "application's transaction. A job enqueued inside transaction.atomic() on 'default' "
    "commits at once, on its own connection: a worker may run it before the application's "
    "data commits, and it stays queued when that transaction rolls back."
)
W014_HINT = (
    "Enqueue in transaction.on_commit() of the application's database (the job then exists "
    "only if the data committed, but a crash between the two commits loses it), or make the "
    "handlers idempotent and tolerant of rows that are not there (yet). Silence "
    "durable_jobs.W014 in SILENCED_SYSTEM_CHECKS once you have. See "
    "docs/guides/queue-database.md."
)


@checks.register(checks.Tags.compatibility)
def check_queue_database(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """E013/W014: ``DATABASE`` names a database the routers really send the queue to.

    Django reads only the routers in ``DATABASE_ROUTERS``: with ``DATABASE``
    set and ``QueueRouter`` missing (or after a router that decides first),
    the ORM (admin, API, CLI) would use another database than the gateway's
    SQL. No connection is opened.
    """
    from . import db

    alias = _user_setting("DATABASE")
    if alias is not None and not SETTINGS["DATABASE"].is_valid(alias):
        return []  # E003 reports it.
    if alias is not None:
        problems = _routing_problems(alias)
        if problems:
            return problems
    queue_alias = db.database_alias()
    if queue_alias == "default" or queue_alias not in connections.settings:
        return []
    return [checks.Warning(W014.format(alias=queue_alias), hint=W014_HINT, id="durable_jobs.W014")]


def _routing_problems(alias: str) -> list[checks.CheckMessage]:
    """E013: the alias exists, and reads, writes and migrations of ``Job`` go there only."""

    def error(message: str, hint: str) -> checks.CheckMessage:
        return checks.Error(message, hint=hint, obj=Job, id="durable_jobs.E013")

    if alias not in connections.settings:
        return [
            error(
                E013_UNKNOWN.format(name=SETTINGS_NAME, alias=alias),
                E013_UNKNOWN_HINT.format(alias=alias),
            )
        ]
    errors = []
    for what, routed in (
        ("writes", router.db_for_write(Job) or "default"),
        ("reads", router.db_for_read(Job) or "default"),
    ):
        if routed != alias:
            message = E013_NOT_ROUTED.format(
                name=SETTINGS_NAME, alias=alias, what=what, routed=routed
            )
            errors.append(error(message, E013_ROUTER_HINT))
    if not router.allow_migrate_model(alias, Job):
        errors.append(
            error(E013_NO_MIGRATE.format(name=SETTINGS_NAME, alias=alias), E013_ROUTER_HINT)
        )
    # A test mirror shares its database's tables; migrate never runs on it.
    others = [
        other
        for other in connections.settings
        if other != alias
        and not connections.settings[other].get("TEST", {}).get("MIRROR")
        and router.allow_migrate_model(other, Job)
    ]
    if others:
        message = E013_MIGRATES_ELSEWHERE.format(
            name=SETTINGS_NAME, alias=alias, others=", ".join(map(repr, sorted(others)))
        )
        errors.append(error(message, E013_ROUTER_HINT))
    return errors
