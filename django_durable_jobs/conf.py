"""The ``DURABLE_JOBS`` settings, read lazily.

Every attribute access reads ``settings.DURABLE_JOBS`` again, so
``override_settings`` works in tests and nothing is frozen at import time
(the trap django-prometheus fell into). Each key carries its unit in its
name. Unknown keys and ill-typed values are reported by the system checks
(``durable_jobs.E002`` / ``E003``); reading an ill-typed value raises
``ImproperlyConfigured`` so that a bad setting is never silently replaced by
its default.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from .constants import (
    MAX_ATTEMPTS_LIMIT,
    MAX_DELAY_SECONDS,
    NOTIFY_CHANNEL_MAX_BYTES,
    PRIORITY_MAX,
    PRIORITY_MIN,
)
from .durations import is_seconds, parse_duration
from .names import is_queue_name
from .rates import FlowError, parse_rate_limit

SETTINGS_NAME = "DURABLE_JOBS"
#: The largest page the REST API serves, whatever ``API_PAGE_SIZE`` or
#: ``?page_size=`` ask for: a bound on one request's work.
API_MAX_PAGE_SIZE = 1000


# The *_SECONDS settings are numbers of seconds as ``durations.seconds``
# defines them (a number, not a timedelta: the code reads them with float()).
def _positive_seconds(value: Any) -> bool:
    return is_seconds(value, allow_zero=False, maximum=None, allow_timedelta=False)


def _non_negative_seconds(value: Any) -> bool:
    return is_seconds(value, allow_zero=True, maximum=None, allow_timedelta=False)


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _fraction(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 1


def _priority(value: Any) -> bool:
    return _int(value) and PRIORITY_MIN <= value <= PRIORITY_MAX


def _max_attempts(value: Any) -> bool:
    return _positive_int(value) and value <= MAX_ATTEMPTS_LIMIT


def _bool(value: Any) -> bool:
    return isinstance(value, bool)


def _bool_or_none(value: Any) -> bool:
    return value is None or isinstance(value, bool)


def _import_strings(value: Any) -> bool:
    return (
        isinstance(value, (list, tuple))
        and bool(value)
        and all(isinstance(item, str) and "." in item and item.strip() == item for item in value)
    )


def _import_strings_or_none(value: Any) -> bool:
    # Unlike the permission classes, an empty list is meaningful: no throttle.
    return value is None or (
        isinstance(value, (list, tuple))
        and all(isinstance(item, str) and "." in item and item.strip() == item for item in value)
    )


def _rate_or_none(value: Any) -> bool:
    if value is None:
        return True
    try:
        parse_rate_limit(value)
    except FlowError:
        return False
    return True


def _page_size(value: Any) -> bool:
    return _positive_int(value) and value <= API_MAX_PAGE_SIZE


def _channel(value: Any) -> bool:
    return (
        isinstance(value, str)
        and bool(value.strip())
        and len(value.encode()) <= NOTIFY_CHANNEL_MAX_BYTES
        and "\x00" not in value
    )


def _alias_or_none(value: Any) -> bool:
    # The shape only: whether DATABASES has the alias is durable_jobs.E009's.
    return value is None or (isinstance(value, str) and bool(value) and value.strip() == value)


def _time_limit(value: Any) -> bool:
    return is_seconds(value, allow_zero=False, maximum=MAX_DELAY_SECONDS, allow_timedelta=False)


def _time_limit_or_none(value: Any) -> bool:
    return value is None or _time_limit(value)


#: The statuses ``RETENTION`` may name: finished jobs only.
RETENTION_STATUSES = ("completed", "cancelled", "dead")


def _retention(value: Any) -> bool:
    if value is None:
        return True
    if not isinstance(value, Mapping):
        return False
    for status, period in value.items():
        if status not in RETENTION_STATUSES:
            return False
        if period is None:
            continue
        try:
            if parse_duration(period).total_seconds() <= 0:
                return False
        except ValueError:
            return False
    return True


def _history_partition(value: Any) -> bool:
    """A duration of at least a minute that divides a day into whole intervals."""
    try:
        seconds = parse_duration(value).total_seconds()
    except (TypeError, ValueError):
        return False
    return seconds >= 60 and seconds == int(seconds) and 86_400 % int(seconds) == 0


def _names_or_none(value: Any) -> bool:
    # The shape only: each name is checked by durable_jobs.E010, which names it.
    return value is None or (
        isinstance(value, (list, tuple, set, frozenset))
        and all(isinstance(name, str) for name in value)
    )


def _schedules(value: Any) -> bool:
    # The shape only: each entry's contents are checked by durable_jobs.E007,
    # which names the schedule and the problem.
    return isinstance(value, Mapping) and all(
        isinstance(name, str) and isinstance(entry, Mapping) for name, entry in value.items()
    )


def _queues(value: Any) -> bool:
    # The shape only: each entry's options are checked by durable_jobs.E008,
    # which names the queue and the problem.
    return isinstance(value, Mapping) and all(
        isinstance(name, str) and isinstance(options, Mapping) for name, options in value.items()
    )


@dataclass(frozen=True)
class Setting:
    default: Any
    is_valid: Callable[[Any], bool]
    expected: str
    doc: str


#: Every key ``DURABLE_JOBS`` accepts, with its default. docs/reference/settings.md
#: mirrors this table; tests/unit/test_conf.py keeps the two in step.
SETTINGS: dict[str, Setting] = {
    "DEFAULT_QUEUE": Setting(
        "default",
        is_queue_name,
        "a queue name (letters, digits, '_', '-' and '.')",
        "Queue for jobs whose handler and caller name none.",
    ),
    "DEFAULT_PRIORITY": Setting(
        0,
        _priority,
        f"an integer from {PRIORITY_MIN} to {PRIORITY_MAX}",
        "Priority for jobs whose handler and caller name none.",
    ),
    "DEFAULT_MAX_ATTEMPTS": Setting(
        5,
        _max_attempts,
        f"an integer from 1 to {MAX_ATTEMPTS_LIMIT}",
        "Attempts before a failing job goes dead, unless the handler or caller says otherwise.",
    ),
    "BACKOFF_BASE_SECONDS": Setting(
        1.0,
        _positive_seconds,
        "a number > 0",
        "Delay before the first retry; it doubles with each further attempt.",
    ),
    "BACKOFF_MAX_SECONDS": Setting(
        3600.0,
        _positive_seconds,
        "a number > 0",
        "Cap on the retry delay.",
    ),
    "BACKOFF_JITTER": Setting(
        0.1,
        _fraction,
        "a number between 0 and 1",
        "Random spread applied to each retry delay, as a fraction of it.",
    ),
    "LEASE_SECONDS": Setting(
        30.0,
        _positive_seconds,
        "a number > 0",
        "How long a claim lasts without a heartbeat before any worker may reap it.",
    ),
    "GRACE_PERIOD_SECONDS": Setting(
        30.0,
        _non_negative_seconds,
        "a number >= 0",
        "How long in-flight jobs may finish after the first SIGTERM/SIGINT.",
    ),
    "TIMEOUT_SECONDS": Setting(
        None,
        _time_limit_or_none,
        f"None or a number of seconds > 0 and <= {MAX_DELAY_SECONDS}",
        "Time limit of one attempt for jobs whose handler and enqueue set none; None: no limit.",
    ),
    "TIMEOUT_GRACE_SECONDS": Setting(
        10.0,
        _positive_seconds,
        "a number > 0",
        "How long a handler thread may keep running past its time limit (the attempt already "
        "failed; the thread is never interrupted) before the worker stops claiming, lets its "
        "other jobs finish and recycles itself (exit code 3).",
    ),
    "UNKNOWN_TYPE_DEAD_AFTER_SECONDS": Setting(
        3600.0,
        _non_negative_seconds,
        "a number >= 0",
        "How long after its creation a job whose type no worker that claims it has a handler "
        "for may wait for one: until then a worker gives it back (its attempt not counted, "
        "available again 5 s later); after it, the job goes dead. 0: dead at the first claim.",
    ),
    "POLL_INTERVAL_SECONDS": Setting(
        2.0,
        _positive_seconds,
        "a number > 0",
        "Fallback poll when no notification arrives.",
    ),
    "WAIT_POLL_INTERVAL_SECONDS": Setting(
        2.0,
        _positive_seconds,
        "a number > 0",
        "How often wait(), await_job() and GET /api/jobs/{id}?wait= look at the job when no "
        "notification comes (the fallback of LISTEN/NOTIFY).",
    ),
    "ERROR_HISTORY_LIMIT": Setting(
        20,
        _positive_int,
        "an integer >= 1",
        "How many failures a job keeps in its errors history (oldest dropped first).",
    ),
    "NOTIFY_CHANNEL": Setting(
        "durable_jobs",
        _channel,
        f"a non-empty string of at most {NOTIFY_CHANNEL_MAX_BYTES} bytes",
        "PostgreSQL NOTIFY channel that enqueue signals and workers listen on; finished jobs "
        "are NOTIFYed on it with '_finished' appended, for wait().",
    ),
    "DATABASE": Setting(
        None,
        _alias_or_none,
        "None or the alias of a PostgreSQL database in DATABASES",
        "The DATABASES alias the queue lives in: its tables, migrations, enqueue, the worker, "
        "the admin, the REST API and the CLI. None: where the project's routers send the Job "
        "model, else 'default'. Another alias needs django_durable_jobs.routers.QueueRouter "
        "in DATABASE_ROUTERS (E013), and takes enqueue out of the application's transactions "
        "(W014).",
    ),
    "LISTEN_DATABASE": Setting(
        None,
        _alias_or_none,
        "None or the alias of a database in DATABASES",
        "The DATABASES alias whose connection the workers and wait() LISTEN on, for a job "
        "database reached through a transaction pooler (which drops LISTEN): a direct "
        "connection to the same PostgreSQL database. None: LISTEN on the job database's own "
        "connection. Checked by E009.",
    ),
    "PREPARE_STATEMENTS": Setting(
        None,
        _bool_or_none,
        "None, True or False",
        "Whether workers run their outcome writes, heartbeats and keyed claims as prepared "
        "statements on their own connections (parsed and planned once per connection). None: "
        "when the connection reaches PostgreSQL itself, not a pooler (the backend pid it was "
        "given at connect is the server's); True: always (a direct connection, or PgBouncer "
        "1.21+ with max_prepared_statements); False: never (docs/guides/poolers.md).",
    ),
    "NOTIFY_FINISHED": Setting(
        True,
        _bool,
        "True or False",
        "Whether the workers (and cancels) NOTIFY finished jobs for wait(); False: waiters "
        "poll only, and outcomes' commits skip PostgreSQL's cluster-wide notify lock.",
    ),
    "TRACING": Setting(
        True,
        _bool,
        "True or False",
        "With opentelemetry-api installed: whether enqueue stores the current span's trace "
        "context with each job and workers trace each attempt (docs/guides/monitoring.md); "
        "without it, nothing happens either way.",
    ),
    "RUN_IMMEDIATELY": Setting(
        False,
        _bool,
        "True or False",
        "For tests only: each job enqueue(), enqueue_many(), chain() and group() create runs in "
        "the enqueuing process, as run_jobs() runs it, once the caller's transaction commits "
        "(a test's own transaction does not count: at once); checked by W012.",
    ),
    "API_MAX_BODY_BYTES": Setting(
        1_048_576,
        _positive_int,
        "an integer >= 1",
        "Largest request body the REST API reads; larger ones are refused with 413.",
    ),
    "API_ALLOW_UNREGISTERED_TYPES": Setting(
        False,
        _bool,
        "True or False",
        "Whether the REST API enqueues job types no handler is registered for in this process.",
    ),
    "API_ENQUEUE_TYPES": Setting(
        None,
        _names_or_none,
        "None, or a list of job type names (a name ending in '.*' matches a prefix)",
        "The job types POST /api/jobs accepts. None: every registered type except the "
        "package's own and those declared with a schedule. Checked by E010 and W011.",
    ),
    "API_ENQUEUE_QUEUES": Setting(
        None,
        _names_or_none,
        "None, or a list of queue names",
        "The queues a POST /api/jobs may name. None: the declared ones (DEFAULT_QUEUE, the "
        "keys of QUEUES, the queues of registered handlers). Checked by E010.",
    ),
    "API_MAX_PRIORITY": Setting(
        0,
        _priority,
        "an integer from -32768 to 32767",
        "Highest priority a POST /api/jobs may ask for (400 above it): by default REST "
        "callers may lower their jobs' priority, not jump ahead of the default.",
    ),
    "API_MAX_ATTEMPTS": Setting(
        25,
        _max_attempts,
        "an integer >= 1",
        "Most attempts a POST /api/jobs may ask for (400 above it).",
    ),
    "CLI_REQUIRE_USER": Setting(
        False,
        _bool,
        "True or False",
        "Whether `manage.py jobs` must be told which Django user acts (--user or "
        "$DURABLE_JOBS_USER), whose permissions it then checks; False: without one, the OS "
        "login is recorded in the audit trail and nothing is checked.",
    ),
    "API_PERMISSION_CLASSES": Setting(
        ("django_durable_jobs.api.permissions.HasJobPermission",),
        _import_strings,
        "a non-empty list or tuple of dotted import paths of DRF permission classes",
        "DRF permission classes that guard every REST endpoint but health (all must allow).",
    ),
    "API_FAILED_AUTH_RATE": Setting(
        "10/m",
        _rate_or_none,
        "None, or N/s, N/m or N/h (say '10/m')",
        "Failed authentications one client address may make per window before the REST API "
        "answers its requests 429 without checking credentials (counted in Django's default "
        "cache); None: never.",
    ),
    "API_THROTTLE_CLASSES": Setting(
        None,
        _import_strings_or_none,
        "None, or a list or tuple of dotted import paths of DRF throttle classes",
        "DRF throttle classes for every REST endpoint but health; None: REST_FRAMEWORK's "
        "DEFAULT_THROTTLE_CLASSES (none unless the project sets some).",
    ),
    "API_MAX_TIMEOUT_SECONDS": Setting(
        3600.0,
        _time_limit,
        f"a number of seconds > 0 and <= {MAX_DELAY_SECONDS}",
        "Largest per-job timeout a POST /api/jobs may ask for (400 above it).",
    ),
    "API_MAX_WAITING_REQUESTS": Setting(
        4,
        _positive_int,
        "an integer >= 1",
        "Most GET /api/jobs/{id}?wait= requests one process holds at once (each holds a server "
        "thread); above it, 503 with Retry-After.",
    ),
    "API_MAX_WAITING_REQUESTS_PER_USER": Setting(
        2,
        _positive_int,
        "an integer >= 1",
        "Most of a process's waiting GET /api/jobs/{id}?wait= requests one user (or, "
        "unauthenticated, one client address) holds; above it, 503 with Retry-After.",
    ),
    "API_PAGE_SIZE": Setting(
        50,
        _page_size,
        f"an integer from 1 to {API_MAX_PAGE_SIZE}",
        "Jobs per page in the REST API's list (?page_size= may ask for up to "
        f"{API_MAX_PAGE_SIZE}).",
    ),
    "API_MAX_PAGE_BYTES": Setting(
        4_194_304,
        _positive_int,
        "an integer >= 1",
        "Most bytes of rows one REST list page carries when ?include= asks for payloads, "
        "results or errors: the page ends before the row that would pass it (one row at "
        "least), and its next cursor continues from there.",
    ),
    "STEP_RESULT_MAX_BYTES": Setting(
        1_048_576,
        _positive_int,
        "an integer >= 1",
        "Largest result of one durable step (ctx.step), as JSON text in bytes; a larger one "
        "fails the attempt with an error naming the step.",
    ),
    "RETENTION": Setting(
        {"completed": "7d", "cancelled": "7d", "dead": "30d"},
        _retention,
        "None, or a dict mapping 'completed', 'cancelled' and 'dead' to a duration "
        "such as '7d' (or None to keep that status forever)",
        "How long workers keep finished jobs before pruning them; None turns pruning off.",
    ),
    "HISTORY_PARTITION": Setting(
        "1d",
        _history_partition,
        "a duration of at least a minute that divides a day, such as '1d', '1h' or '15m'",
        "The time range of one partition of completed and cancelled jobs "
        "(docs/guides/retention.md): retention drops a partition whole once its range is "
        "older than the retention period, so jobs are kept up to one range longer. Workers "
        "create the ranges ahead.",
    ),
    "HEALTH_HORIZON_AGE_SECONDS": Setting(
        30.0,
        _positive_seconds,
        "a number > 0",
        "How long a session or a prepared transaction may hold back the vacuum horizon of "
        "the job tables before `jobs doctor` asks for an operator (exit status 1), a worker's "
        "/healthz names it and the admin's Queues page blames it for dead tuples "
        "(docs/guides/monitoring.md).",
    ),
    "HEALTH_DEAD_TUPLE_RATIO": Setting(
        0.2,
        _fraction,
        "a number between 0 and 1",
        "Share of a job table's tuples that may be dead (dead / (live + dead)) before "
        "`jobs doctor`, /healthz and the Queues page call its dead tuples high (with at "
        "least HEALTH_MIN_DEAD_TUPLES of them).",
    ),
    "HEALTH_MIN_DEAD_TUPLES": Setting(
        10_000,
        _positive_int,
        "an integer >= 1",
        "Fewer dead tuples than this in a table are never called high, whatever their "
        "share (a small table's few dead rows cost nothing).",
    ),
    "HEALTH_OLDEST_PENDING_SECONDS": Setting(
        600.0,
        _positive_seconds,
        "a number > 0",
        "How long the oldest runnable pending job of a queue that is not paused may wait "
        "before `jobs doctor` asks for an operator (the DurableJobsOldestPendingTooOld "
        "alert's threshold).",
    ),
    "QUEUES": Setting(
        {},
        _queues,
        "a dict mapping queue names to dicts such as {'rate_limit': '10/s', 'concurrency': 4}",
        "Cluster-wide limits per queue: rate_limit (N/s, N/m, N/h starts in any window) and "
        "concurrency (jobs running at once over all workers); checked by E008.",
    ),
    "SCHEDULES": Setting(
        {},
        _schedules,
        "a dict mapping schedule names to dicts such as "
        "{'type': 'reports.build', 'cron': '0 3 * * *'}",
        "Periodic jobs declared in settings (docs/guides/periodic-jobs.md); checked by E007.",
    ),
}


class DurableJobsSettings:
    """Attribute access to ``settings.DURABLE_JOBS`` with defaults."""

    def user_settings(self) -> Mapping[str, Any]:
        value = getattr(settings, SETTINGS_NAME, None)
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise ImproperlyConfigured(f"settings.{SETTINGS_NAME} must be a dict.")
        return value

    def __getattr__(self, name: str) -> Any:
        try:
            spec = SETTINGS[name]
        except KeyError:
            raise AttributeError(f"Invalid {SETTINGS_NAME} setting: {name!r}") from None
        user = self.user_settings()
        if name not in user:
            return spec.default
        value = user[name]
        if not spec.is_valid(value):
            raise ImproperlyConfigured(
                f"{SETTINGS_NAME}[{name!r}] must be {spec.expected}, got {value!r}."
            )
        return value


jobs_settings = DurableJobsSettings()
