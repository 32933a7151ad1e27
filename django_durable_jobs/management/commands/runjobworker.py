"""``manage.py runjobworker``: parse and check the options, then run a Worker."""

from __future__ import annotations

import argparse
import math
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...conf import jobs_settings
from ...constants import QUEUE_MAX_LENGTH, QUEUE_NAME_RE
from ...worker import Worker, WorkerConfig
from ...worker.metrics_server import MetricsServer

MAX_CONCURRENCY = 1_000


def queue_list(value: str) -> frozenset[str]:
    names = [name.strip() for name in value.split(",")]
    if not value.strip() or any(not name for name in names):
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a comma-separated list of queue names (e.g. 'emails,default')"
        )
    for name in names:
        if ":" in name:
            raise argparse.ArgumentTypeError(
                f"{name!r}: per-queue slots ('queue:N') are not supported yet; "
                "list queue names only and use --concurrency"
            )
        if len(name) > QUEUE_MAX_LENGTH or not QUEUE_NAME_RE.match(name):
            raise argparse.ArgumentTypeError(
                f"{name!r} is not a valid queue name (letters, digits, '_', '-' and '.')"
            )
    return frozenset(names)


def concurrency(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
    if not 1 <= number <= MAX_CONCURRENCY:
        raise argparse.ArgumentTypeError(f"must be between 1 and {MAX_CONCURRENCY}, got {number}")
    return number


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
    if isinstance(value, (set, frozenset, list, tuple)):
        return ",".join(map(str, value))
    return str(value)


class Command(BaseCommand):
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
            help="Comma-separated queues to serve (default: all queues).",
        )
        parser.add_argument(
            "--concurrency",
            type=concurrency,
            default=8,
            help="Jobs run at once in this process, one thread each (default: %(default)s).",
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

    def handle(self, *args: Any, **options: Any) -> None:
        for name, parse in (
            ("queues", queue_list),
            ("concurrency", concurrency),
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

        config = WorkerConfig(
            queues=options["queues"],
            concurrency=options["concurrency"],
            burst=options["burst"],
            grace_period=pick("grace_period", "GRACE_PERIOD_SECONDS"),
            poll_interval=pick("poll_interval", "POLL_INTERVAL_SECONDS"),
            lease_seconds=pick("lease_seconds", "LEASE_SECONDS"),
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
