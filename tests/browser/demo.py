"""A realistic admin state for the browser tests and their screenshots.

A few queues with finished, pending and dead jobs, a paused queue, and dead
jobs whose errors are real: their handlers raise and a worker in this
process runs them, so the tracebacks and error histories on the pages are
what an operator would see, not strings written by hand.

The handlers are registered for the test only (``register_demo_handlers``,
with the ``clean_registry`` fixture putting the registry back afterwards):
other tests list the registered types and must not see these.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.test import override_settings

from django_durable_jobs import JobContext, enqueue, job
from django_durable_jobs.models import Job, JobStatus
from django_durable_jobs.pausing import pause_queue
from django_durable_jobs.registry import registry
from django_durable_jobs.worker.loop import default_worker_id
from tests.factories import run_worker_until

#: The superuser's login (as the example project's demo: ./dev demo).
SUPERUSER = ("admin", "admin")
#: The queue the demo pauses (its pending jobs wait for a resume).
PAUSED_QUEUE = "reports"
#: The queue the pause test pauses and resumes.
EMAILS_QUEUE = "emails"


class SMTPUnavailable(ConnectionError):
    """The mail relay refused the connection."""


class PaymentGatewayTimeout(TimeoutError):
    """The payment provider did not answer in time."""


def _open_smtp_connection(host: str, port: int) -> None:
    raise ConnectionRefusedError(111, f"Connection refused: {host}:{port}")


def _deliver(recipient: str) -> None:
    try:
        _open_smtp_connection("smtp.example.com", 587)
    except ConnectionRefusedError as exc:
        raise SMTPUnavailable(f"SMTP server unavailable, receipt for {recipient} not sent") from exc


def send_receipt(ctx: JobContext) -> None:
    _deliver(ctx.payload["email"])


def send_welcome(ctx: JobContext) -> dict[str, Any]:
    return {"sent_to": ctx.payload["email"]}


def charge_card(ctx: JobContext) -> None:
    raise PaymentGatewayTimeout(
        f"payment gateway did not answer within 10 s (order {ctx.payload['order_id']})"
    )


def _parse_row(row: dict[str, str]) -> tuple[str, str]:
    return row["name"], row["email"]


def import_customers(ctx: JobContext) -> int:
    rows = ctx.payload["rows"]
    return len([_parse_row(row) for row in rows])


def build_report(ctx: JobContext) -> dict[str, Any]:
    return {"month": ctx.payload["month"], "pages": 12}


def register_demo_handlers() -> None:
    """Register the demo's handlers (call it under the ``clean_registry`` fixture).

    The test suite's own handlers (``tests.*``) leave the registry meanwhile,
    so the type filter lists what an application would: its handlers and
    the example project's.
    """
    for name in [name for name in registry._handlers if name.startswith("tests.")]:
        del registry._handlers[name]
    job("emails.send_receipt", queue=EMAILS_QUEUE, max_attempts=3)(send_receipt)
    job("emails.send_welcome", queue=EMAILS_QUEUE)(send_welcome)
    job("billing.charge_card", queue="billing", max_attempts=2)(charge_card)
    job("imports.customers_csv", max_attempts=1)(import_customers)
    job("reports.build_monthly", queue=PAUSED_QUEUE)(build_report)


@dataclass
class DemoState:
    dead: list[Job] = field(default_factory=list)
    paused_pending: list[Job] = field(default_factory=list)

    @property
    def dead_receipt(self) -> Job:
        """A dead ``emails.send_receipt`` job: three attempts, a chained traceback."""
        return next(j for j in self.dead if j.type == "emails.send_receipt")


def _finished(ids: list[uuid.UUID]) -> bool:
    unfinished = (JobStatus.PENDING, JobStatus.RUNNING)
    return not Job.objects.filter(pk__in=ids, status__in=unfinished).exists()


def build_demo_state() -> DemoState:
    """Run the demo's jobs to their end with a real worker, then pause ``reports``.

    Retries back off by milliseconds here, so three attempts take well under
    a second. Jobs enqueued after the run stay pending: the paused queue's,
    and one delayed by an hour.
    """
    register_demo_handlers()
    ran = [
        *(
            enqueue("emails.send_welcome", {"email": f"user{n}@example.com"}).job.pk
            for n in range(1, 5)
        ),
        enqueue("reports.build_monthly", {"month": "2025-10"}).job.pk,
        enqueue("emails.send_receipt", {"email": "ada@example.com", "order_id": 1041}).job.pk,
        enqueue("emails.send_receipt", {"email": "grace@example.com", "order_id": 1042}).job.pk,
        enqueue("billing.charge_card", {"order_id": 1042, "amount": "49.00"}).job.pk,
        enqueue(
            "imports.customers_csv",
            {"file": "customers-2025-11.csv", "rows": [{"name": "Ada"}, {"name": "Grace"}]},
        ).job.pk,
    ]
    fast_retries = {
        **settings.DURABLE_JOBS,
        "BACKOFF_BASE_SECONDS": 0.01,
        "BACKOFF_MAX_SECONDS": 0.02,
    }
    with override_settings(DURABLE_JOBS=fast_retries):
        run_worker_until(
            lambda: _finished(ran),
            what="the demo jobs to finish",
            worker_id=default_worker_id(),  # host:pid:random, as runjobworker's
        )
    pause_queue(PAUSED_QUEUE)
    paused_pending = [
        enqueue("reports.build_monthly", {"month": month}).job for month in ("2025-11", "2025-12")
    ]
    enqueue("emails.send_welcome", {"email": "later@example.com"}, delay=3600)
    dead = list(Job.objects.filter(pk__in=ran, status=JobStatus.DEAD).order_by("created_at"))
    assert len(dead) == 4, [(j.type, j.status) for j in Job.objects.filter(pk__in=ran)]
    return DemoState(dead=dead, paused_pending=paused_pending)
