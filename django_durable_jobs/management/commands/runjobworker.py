"""``manage.py runjobworker``: parse and check the options, then run a Worker."""

from __future__ import annotations

import argparse
import math
from typing import Any

from django.core import checks
from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...conf import jobs_settings
from ...constants import QUEUE_MAX_LENGTH, QUEUE_NAME_RE
from ...worker import Worker, WorkerConfig
from ...worker.metrics_server import MetricsServer
from ...worker.pool import MAX_SLOTS, SCALE_DOWN_AFTER_SECONDS, Slots

MAX_CONCURRENCY = MAX_SLOTS


def slot_count(value: str) -> Slots:
    """``"8"`` (a fixed number of slots) or ``"2-16"`` (elastic, from 2 up to 16)."""
    low, dash, high = value.strip().partition("-")
    try:
        minimum = int(low)
        maximum = int(high) if dash else minimum
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a number of slots N or a range MIN-MAX (e.g. '8' or '2-16')"
        ) from None
    if not (1 <= minimum <= MAX_CONCURRENCY and 1 <= maximum <= MAX_CONCURRENCY):
        raise argparse.ArgumentTypeError(
            f"must be between 1 and {MAX_CONCURRENCY}, got {value.strip()}"
        )
    if minimum > maximum:
        raise argparse.ArgumentTypeError(
            f"{value.strip()}: the minimum {minimum} is more than the maximum {maximum}"
        )
    return Slots(minimum, maximum)


def queue_list(value: str) -> frozenset[str] | dict[str, Slots]:
    """``"emails,default"`` (names: the queues share --concurrency) or
    ``"emails:4,default:2-8"`` (each queue has slots of its own).

    Every queue has a count or none does: with a mix it would be unclear how
    many slots the uncounted queues get.
    """
    items = [item.strip() for item in value.split(",")]
    if not value.strip() or any(not item for item in items):
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a comma-separated list of queue names "
            "(e.g. 'emails,default' or 'emails:4,default:8')"
        )
    counted: dict[str, Slots] = {}
    names: list[str] = []
    for item in items:
        name, colon, count = (part.strip() for part in item.partition(":"))
        if not name:
            raise argparse.ArgumentTypeError(f"{item!r} has no queue name before ':'")
        if len(name) > QUEUE_MAX_LENGTH or not QUEUE_NAME_RE.match(name):
            raise argparse.ArgumentTypeError(
                f"{name!r} is not a valid queue name (letters, digits, '_', '-' and '.')"
            )
        if name in names:
            raise argparse.ArgumentTypeError(f"queue {name!r} is listed twice")
        names.append(name)
        if colon:
            try:
                counted[name] = slot_count(count)
            except argparse.ArgumentTypeError as exc:
                raise argparse.ArgumentTypeError(f"{item!r}: {exc}") from None
    if not counted:
        return frozenset(names)
    if len(counted) < len(names):
        uncounted = ", ".join(name for name in names if name not in counted)
        raise argparse.ArgumentTypeError(
            f"{value!r} gives slots to some queues but not to {uncounted}: give every queue "
            "its slots (e.g. 'emails:4,default:8') or none (they then share --concurrency)"
        )
    total = sum(slots.maximum for slots in counted.values())
    if total > MAX_CONCURRENCY:
        raise argparse.ArgumentTypeError(
            f"the queues' slots add up to {total}, over the limit of {MAX_CONCURRENCY}"
        )
    return counted


def concurrency(value: str) -> Slots:
    return slot_count(value)


def seconds(*, allow_zero: bool) -> Any:
    def parse(value: str) -> float:
        try:
            number = float(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds") from None
        if not math.isfinite(number) or number < 0 or (number == 0 and not allow_zero):
            bound = ">= 0" if allow_zero else "> 0"
            raise argparse.ArgumentTypeError(f"must be a number of seconds {bound}, got {value}")
        return number

    return parse


def port(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a port number") from None
    if not 1 <= number <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port from 1 to 65535, got {number}")
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


#: The system checks a worker runs at start: all but the URL checks. Those
#: import the project's whole URLconf (REST frameworks, schema generators,
#: every view module), which a worker never serves: measured on the example
#: project, about 0.15 s of start-up and 6 MB of RSS per worker process.
#: ``manage.py check`` and the web process still run them.
WORKER_CHECK_TAGS = tuple(
    tag for name, tag in vars(checks.Tags).items() if not name.startswith("_") and tag != "urls"
)


class Command(BaseCommand):
    requires_system_checks = WORKER_CHECK_TAGS
    help = (
        "Run a durable-jobs worker: claim jobs from PostgreSQL and run their handlers. "
        "The first SIGTERM/SIGINT stops claiming and lets running jobs finish within the "
        "grace period; a second one exits at once."
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
            "--burst",
            action="store_true",
            help="Exit 0 once no runnable job is left (tests, cron-style use).",
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
            "(default: none). Give each worker process its own port.",
        )
        parser.add_argument(
            "--metrics-host",
            default="0.0.0.0",
            help="Address the --metrics-port server binds to; 127.0.0.1 keeps it local "
            "(default: %(default)r, so that Prometheus can scrape it from another host).",
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
        worker = Worker(config)
        server = self._metrics_server(options, worker)
        try:
            exit_code = worker.run()
        finally:
            if server is not None:
                server.stop()
        if exit_code:
            raise SystemExit(exit_code)

    def _metrics_server(self, options: dict[str, Any], worker: Worker) -> MetricsServer | None:
        if options.get("metrics_port") is None:
            return None
        try:
            server = MetricsServer(options["metrics_host"], options["metrics_port"], worker.healthy)
        except (OSError, RuntimeError) as exc:
            raise CommandError(f"--metrics-port: {exc}") from None
        server.start()
        return server
