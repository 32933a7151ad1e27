"""``manage.py runjobworker``: parse and check the options, then run a Worker.

The rules the options follow are not written here: slot ranges and queue
lists are ``worker/slots.py``'s, numbers of seconds ``durations``'. This
module turns their ``ValueError`` into argparse's error.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, TypeVar

from django.core import checks
from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...authorization import APP_LABEL
from ...conf import jobs_settings
from ...durations import parse_seconds
from ...worker import Worker, WorkerConfig, processes, reloading
from ...worker.config import default_worker_id
from ...worker.metrics_server import DEFAULT_HOST as DEFAULT_METRICS_HOST
from ...worker.metrics_server import MetricsServer
from ...worker.pool import SCALE_DOWN_AFTER_SECONDS
from ...worker.slots import MAX_SLOTS, Slots, parse_queues

MAX_CONCURRENCY = MAX_SLOTS

T = TypeVar("T")


def _argument(parse: Callable[[str], T], value: str) -> T:
    """``parse(value)``, its ``ValueError`` as argparse's ``ArgumentTypeError`` (same message)."""
    try:
        return parse(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def slot_count(value: str) -> Slots:
    """``"8"`` (a fixed number of slots) or ``"2-16"`` (elastic, from 2 up to 16)."""
    return _argument(Slots.parse, value)


def queue_list(value: str) -> frozenset[str] | dict[str, Slots]:
    """``"emails,default"`` (names: the queues share --concurrency) or
    ``"emails:4,default:2-8"`` (each queue has slots of its own)."""
    return _argument(parse_queues, value)


def concurrency(value: str) -> Slots:
    return slot_count(value)


def seconds(*, allow_zero: bool) -> Callable[[str], float]:
    """A parser of a number of seconds (``> 0``, or ``>= 0`` with ``allow_zero``)."""

    def parse(value: str) -> float:
        return _argument(lambda text: parse_seconds(text, allow_zero=allow_zero), value)

    return parse


def port(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a port number") from None
    if not 1 <= number <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port from 1 to 65535, got {number}")
    return number


def process_count(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of processes") from None
    if not 1 <= number <= processes.MAX_PROCESSES:
        raise argparse.ArgumentTypeError(
            f"must be from 1 to {processes.MAX_PROCESSES}, got {number}"
        )
    return number


def worker_id(value: str) -> str:
    if not value.strip() or len(value) > 255:
        raise argparse.ArgumentTypeError("must be 1 to 255 characters")
    return value


def _as_text(value: Any) -> str:
    """A keyword argument of call_command as its command-line text, to parse it the same way."""
    if isinstance(value, dict):  # queues={"emails": 4, "webhooks": (1, 8)}
        return ",".join(f"{name}:{_as_text(slots)}" for name, slots in value.items())
    if isinstance(value, tuple) and len(value) == 2 and all(type(v) is int for v in value):
        return f"{value[0]}-{value[1]}"  # concurrency=(2, 16)
    if isinstance(value, (set, frozenset, list, tuple)):
        return ",".join(map(str, value))
    return str(value)


#: The system checks a worker runs at start: all but those of what a worker
#: never serves. The URL checks import the project's whole URLconf (REST
#: frameworks, schema generators, every view module): measured on the
#: example project, about 0.15 s of start-up and 6 MB of RSS per worker
#: process. The admin's checks import its forms and check every ModelAdmin:
#: 0.06 s more. ``manage.py check`` and the web process still run them.
_NOT_FOR_WORKERS = frozenset({"urls", "admin", "templates", "staticfiles"})
WORKER_CHECK_TAGS = tuple(
    tag
    for name, tag in vars(checks.Tags).items()
    if not name.startswith("_") and tag not in _NOT_FOR_WORKERS
)


class Command(BaseCommand):
    requires_system_checks = WORKER_CHECK_TAGS
    help = (
        "Run a durable-jobs worker: claim jobs from PostgreSQL and run their handlers. "
        "The first SIGTERM/SIGINT stops claiming and lets running jobs finish within the "
        "grace period; a second one exits at once. --reload restarts it on code changes."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--queues",
            type=queue_list,
            default=None,
            help="Comma-separated queues to serve (default: all queues). Give each queue "
            "slots of its own with 'emails:4,default:8' (or an elastic 'emails:1-4'); "
            "plain names share --concurrency.",
        )
        parser.add_argument(
            "--concurrency",
            type=concurrency,
            default=None,
            help="Jobs run at once in this process, one thread each: N, or MIN-MAX for a "
            "pool that grows while jobs wait and shrinks when quiet (default: 8).",
        )
        parser.add_argument(
            "--scale-down-after",
            type=seconds(allow_zero=False),
            default=None,
            help="Seconds a slot of an elastic pool may stay unused before it is stopped "
            f"(default: {SCALE_DOWN_AFTER_SECONDS:g}).",
        )
        parser.add_argument(
            "--processes",
            type=process_count,
            default=None,
            help="Worker processes to run, forked after one start-up, each with its own "
            "--concurrency slots (default: 1). Use it to put every core to work: one "
            "process runs Python on one core at a time.",
        )
        parser.add_argument(
            "--burst",
            action="store_true",
            help="Exit 0 once no runnable job is left (tests, cron-style use).",
        )
        parser.add_argument(
            "--reload",
            action="store_true",
            help="Restart on code changes, as runserver does (development): a change stops "
            "the worker gracefully, as a SIGTERM, then a new process runs the new code.",
        )
        parser.add_argument(
            "--grace-period",
            type=seconds(allow_zero=True),
            default=None,
            help="Seconds running jobs get to finish after SIGTERM/SIGINT "
            "(default: DURABLE_JOBS['GRACE_PERIOD_SECONDS'], 30).",
        )
        parser.add_argument(
            "--poll-interval",
            type=seconds(allow_zero=False),
            default=None,
            help="Seconds between polls when no notification arrives "
            "(default: DURABLE_JOBS['POLL_INTERVAL_SECONDS'], 2).",
        )
        parser.add_argument(
            "--lease-seconds",
            type=seconds(allow_zero=False),
            default=None,
            help="How long a claim lasts without a heartbeat before another worker may "
            "reap it (default: DURABLE_JOBS['LEASE_SECONDS'], 30).",
        )
        parser.add_argument(
            "--worker-id",
            type=worker_id,
            default=None,
            help="Name of this worker in leases and logs (default: host:pid:random).",
        )
        parser.add_argument(
            "--metrics-port",
            type=port,
            default=None,
            help="Serve Prometheus /metrics and a /healthz probe on this port "
            "(default: none). Give each worker process its own port; with --processes N, "
            "they serve on this port and the N-1 after it.",
        )
        parser.add_argument(
            "--metrics-host",
            default=DEFAULT_METRICS_HOST,
            metavar="ADDR",
            help="Address the --metrics-port server binds to; 0.0.0.0 lets Prometheus on "
            "another host (or pod) scrape it (default: %(default)r, this host only).",
        )
        parser.add_argument(
            "--no-schedules",
            action="store_true",
            help="Do not enqueue the periodic jobs' ticks from this worker (other workers "
            "still do). Burst workers never do.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        for name, parse in (
            ("queues", queue_list),
            ("concurrency", concurrency),
            ("scale_down_after", seconds(allow_zero=False)),
            ("grace_period", seconds(allow_zero=True)),
            ("poll_interval", seconds(allow_zero=False)),
            ("lease_seconds", seconds(allow_zero=False)),
            ("worker_id", worker_id),
            ("metrics_port", port),
            ("processes", process_count),
        ):
            if options.get(name) is not None:
                try:
                    options[name] = parse(_as_text(options[name]))
                except argparse.ArgumentTypeError as exc:
                    raise CommandError(f"--{name.replace('_', '-')}: {exc}") from None

        def pick(option: str, setting: str) -> float:
            value = options[option]
            return float(getattr(jobs_settings, setting) if value is None else value)

        queues = options["queues"]
        slots: Slots = options["concurrency"] or Slots(8, 8)
        if isinstance(queues, dict) and options["concurrency"] is not None:
            raise CommandError(
                "--concurrency cannot be combined with slots per queue in --queues "
                "(each queue has its own; the process runs their sum)"
            )
        config = WorkerConfig(
            queues=None if isinstance(queues, dict) else queues,
            queue_slots=queues if isinstance(queues, dict) else None,
            concurrency=slots.minimum,
            max_concurrency=slots.maximum,
            scale_down_after=(
                SCALE_DOWN_AFTER_SECONDS
                if options["scale_down_after"] is None
                else options["scale_down_after"]
            ),
            burst=options["burst"],
            grace_period=pick("grace_period", "GRACE_PERIOD_SECONDS"),
            poll_interval=pick("poll_interval", "POLL_INTERVAL_SECONDS"),
            lease_seconds=pick("lease_seconds", "LEASE_SECONDS"),
            schedules=not options.get("no_schedules", False),
        )
        if options["worker_id"]:
            config.worker_id = options["worker_id"]
        reload = options.get("reload", False)
        count = options.get("processes") or 1
        _refuse_combinations(options, config, count, reload)
        _refuse_inside_a_transaction(config.alias)
        if reload and not reloading.is_child():
            # The parent: no worker, no database; the child checks and runs.
            exit_code = reloading.supervise()
            if exit_code:
                raise SystemExit(exit_code)
            return
        _require_migrations(config.alias)
        if count > 1:
            named = options["worker_id"]

            def run_child(index: int) -> int:
                # Each process is a worker of its own: a new id (the default
                # one holds the pid), its own metrics port.
                config.worker_id = f"{named}-{index + 1}" if named else default_worker_id()
                try:
                    return self._run(config, options, reload=False, port_offset=index)
                except CommandError as exc:
                    self.stderr.write(f"CommandError: {exc}")
                    return 1

            exit_code = processes.supervise(count, run_child)
        else:
            exit_code = self._run(config, options, reload=reload)
        if exit_code:
            raise SystemExit(exit_code)

    def _run(
        self, config: WorkerConfig, options: dict[str, Any], *, reload: bool, port_offset: int = 0
    ) -> int:
        """Run one worker here (with Django's reloader beside it under --reload)."""
        worker = Worker(config)
        server = self._metrics_server(options, worker, port_offset)
        try:
            return reloading.serve(worker) if reload else worker.run()
        finally:
            if server is not None:
                server.stop()

    def _metrics_server(
        self, options: dict[str, Any], worker: Worker, port_offset: int = 0
    ) -> MetricsServer | None:
        """The worker's /metrics and /healthz server; with --processes, process i (from
        0) serves on --metrics-port + i."""
        if options.get("metrics_port") is None:
            return None
        try:
            server = MetricsServer(
                options["metrics_host"],
                options["metrics_port"] + port_offset,
                worker.healthy,
                worker.health_notes,
            )
        except (OSError, RuntimeError) as exc:
            raise CommandError(f"--metrics-port: {exc}") from None
        server.start()
        return server


def _refuse_combinations(
    options: dict[str, Any], config: WorkerConfig, count: int, reload: bool
) -> None:
    """CommandError for options that cannot go together."""
    if reload and config.burst:
        raise CommandError(
            "--reload cannot be combined with --burst (a burst worker exits once no job "
            "is left; there is nothing to restart)"
        )
    if reload and options.get("metrics_port") is not None:
        raise CommandError(
            "--reload cannot be combined with --metrics-port (--reload is for development; "
            "each restart would be a new process for Prometheus, its counters back at 0)"
        )
    if count > 1 and reload:
        raise CommandError(
            "--processes cannot be combined with --reload (--reload is for development: "
            "one process that restarts on code changes)"
        )
    if count > 1 and not processes.fork_available():
        raise CommandError("--processes needs os.fork(), which this platform lacks")
    metrics_port = options.get("metrics_port")
    if metrics_port is not None and metrics_port + count - 1 > 65535:
        raise CommandError(
            f"--metrics-port {metrics_port} with --processes {count}: the processes serve "
            f"on ports {metrics_port} to {metrics_port + count - 1}, past 65535"
        )


def _refuse_inside_a_transaction(alias: str) -> None:
    """Refuse to run inside ``atomic()`` (a ``TestCase``'s, say): point to ``run_jobs()``.

    The worker's main thread would claim on that connection, inside the
    caller's uncommitted transaction (its handler threads, on their own
    connections, would not see the data), log false "reaped" warnings, and
    close the connection at the end, which breaks the tests that follow.
    """
    from django.db import DEFAULT_DB_ALIAS, connections

    inside = [a for a in dict.fromkeys((DEFAULT_DB_ALIAS, alias)) if connections[a].in_atomic_block]
    if inside:
        raise CommandError(
            f"runjobworker cannot run inside a transaction (database {inside[0]!r} is in an "
            "atomic block, as in a django.test.TestCase): its data is not committed, and the "
            "worker would close the connection. In tests, run the jobs on the test's own "
            "connection with django_durable_jobs.testing.run_jobs() (docs/guides/testing.md)."
        )


def _require_migrations(alias: str) -> None:
    """Refuse to start on a database that lacks the app's migrations, naming the fix.

    Without them the claim fails on every poll (``relation "durable_jobs_queue"
    does not exist``) and the worker loops for ever without saying to migrate.
    A database that cannot be reached is not refused here: the worker starts
    and retries, as it does when the database goes away later.
    """
    import pkgutil

    from django.db import DatabaseError, connections
    from django.db.migrations.recorder import MigrationRecorder

    from ... import migrations

    # The app's own migration modules against the table of applied ones: one
    # query, none of the other apps' migrations imported (each worker start pays it).
    on_disk = {module.name for module in pkgutil.iter_modules(migrations.__path__)}
    try:
        applied = {name for app, name in MigrationRecorder(connections[alias]).applied_migrations()
                   if app == APP_LABEL}  # fmt: skip
    except DatabaseError:
        return
    missing = sorted(on_disk - applied)
    if missing:
        raise CommandError(
            f"The database {alias!r} lacks {len(missing)} migration(s) of django_durable_jobs "
            f"({', '.join(missing)}): run `python manage.py migrate` first."
        )
