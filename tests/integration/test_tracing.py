"""OpenTelemetry: the trace context stored at enqueue, the spans of enqueue and of attempts.

The SDK's in-memory exporter (``tests/spans.py``) collects the spans; the
worker runs in this process (``tests/factories.py``). Without
OpenTelemetry installed: ``test_without_opentelemetry_installed``.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import Client, override_settings
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from django_durable_jobs import chain, enqueue, enqueue_many, group
from django_durable_jobs.models import Job, JobStatus
from django_durable_jobs.operations import cancel
from tests.factories import PASSWORD, RunningWorker, burst, make_user, wait_until, worker_config
from tests.spans import captured_spans, named, tracer
from tests.testapp.models import Execution

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("fast_backoff")]

ROOT = Path(__file__).resolve().parents[2]
SYSTEM = "django_durable_jobs"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    with captured_spans() as exporter:
        yield exporter


def finished(exporter: InMemorySpanExporter) -> tuple[ReadableSpan, ...]:
    return tuple(exporter.get_finished_spans())


def traceparent(span: ReadableSpan) -> str:
    context = span.get_span_context()
    assert context is not None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def stored(job: Job) -> Any:
    return Job.objects.values_list("trace_context", flat=True).get(pk=job.pk)


def settle(*jobs: Job) -> None:
    """Burst workers until ``jobs`` are finished (retries are a little delayed)."""

    def done() -> bool:
        left = Job.objects.filter(pk__in=[j.pk for j in jobs]).exclude(
            status__in=[JobStatus.COMPLETED, JobStatus.DEAD, JobStatus.CANCELLED]
        )
        if not left.exists():
            return True
        burst()
        return False

    wait_until(done, what="the jobs to finish")


def process_spans(exporter: InMemorySpanExporter, job: Job) -> list[ReadableSpan]:
    """The job's attempt spans, by attempt."""
    found = [
        span
        for span in finished(exporter)
        if span.kind is SpanKind.CONSUMER
        and span.attributes is not None
        and span.attributes.get("messaging.message.id") == str(job.pk)
    ]
    return sorted(found, key=lambda span: span.attributes[f"{SYSTEM}.job.attempt"])  # type: ignore[index]


# --- enqueue ---------------------------------------------------------------------


def test_enqueue_under_a_span_stores_the_context_of_its_send_span(
    spans: InMemorySpanExporter,
) -> None:
    with tracer().start_as_current_span("request") as request:
        job = enqueue("tests.record", {"n": 1}, queue="emails").job
    (send,) = named(finished(spans), "send emails")
    # The send span is the request's child, and the job stores its context.
    assert send.kind is SpanKind.PRODUCER
    assert send.parent is not None and send.parent.span_id == request.get_span_context().span_id
    assert stored(job) == {"traceparent": traceparent(send)}
    assert job.trace_context == stored(job)  # the instance enqueue returned says so too
    assert dict(send.attributes or {}) == {
        "messaging.system": SYSTEM,
        "messaging.operation.type": "send",
        "messaging.operation.name": "send",
        "messaging.destination.name": "emails",
        "messaging.message.id": str(job.pk),
        f"{SYSTEM}.job.type": "tests.record",
        f"{SYSTEM}.jobs.created": 1,
    }


def test_the_tracestate_is_stored_and_baggage_is_not(spans: InMemorySpanExporter) -> None:
    from opentelemetry import baggage
    from opentelemetry import context as otel_context
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState

    parent = SpanContext(
        trace_id=0x1234,
        span_id=0x5678,
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
        trace_state=TraceState([("vendor", "value")]),
    )
    incoming = baggage.set_baggage(
        "user.email", "someone@example.com", trace.set_span_in_context(NonRecordingSpan(parent))
    )
    token = otel_context.attach(incoming)
    try:
        job = enqueue("tests.record").job
    finally:
        otel_context.detach(token)
    (send,) = named(finished(spans), "send default")
    assert stored(job) == {"traceparent": traceparent(send), "tracestate": "vendor=value"}
    assert f"{0x1234:032x}" in stored(job)["traceparent"]


def test_without_a_current_span_nothing_is_stored_and_no_span_made(
    spans: InMemorySpanExporter,
) -> None:
    job = enqueue("tests.record").job
    many = enqueue_many([{"type": "tests.record"}] * 3)
    assert stored(job) is None
    assert {stored(result.job) for result in many} == {None}
    assert job.trace_context is None
    assert finished(spans) == ()


def test_tracing_off_stores_nothing_under_a_span(spans: InMemorySpanExporter) -> None:
    with override_settings(DURABLE_JOBS={"TRACING": False}):
        with tracer().start_as_current_span("request"):
            job = enqueue("tests.record").job
        burst()
    assert stored(job) is None
    assert [span.name for span in finished(spans)] == ["request"]  # no send, no process


def test_enqueue_many_chain_and_group_store_one_send_span_each(
    spans: InMemorySpanExporter,
) -> None:
    with tracer().start_as_current_span("request") as request:
        many = [r.job for r in enqueue_many([{"type": "tests.record"}] * 3)]
        linked = [r.job for r in chain({"type": "tests.record"}, {"type": "tests.value"})]
        shape = [r.job for r in group([{"type": "tests.record"}] * 2, then={"type": "tests.value"})]
        keyed = [
            r.job
            for r in enqueue_many(
                [{"type": "tests.record", "idempotency_key": f"k{i}", "queue": "q"} for i in (1, 2)]
            )
        ]
    sends = [span for span in finished(spans) if span.kind is SpanKind.PRODUCER]
    assert len(sends) == 4
    assert {span.parent.span_id for span in sends if span.parent} == {
        request.get_span_context().span_id
    }
    for send, jobs in zip(sends, (many, linked, shape, keyed), strict=True):
        assert {json.dumps(stored(job)) for job in jobs} == {
            json.dumps({"traceparent": traceparent(send)})
        }
        assert send.attributes is not None
        assert send.attributes["messaging.batch.message_count"] == len(jobs)
        assert send.attributes[f"{SYSTEM}.jobs.created"] == len(jobs)
    # A batch of two types and one queue: the queue names the span.
    assert sends[1].name == "send default"
    assert f"{SYSTEM}.job.type" not in (sends[1].attributes or {})
    assert sends[3].name == "send q"


def test_a_replay_keeps_the_first_context_and_says_it_created_nothing(
    spans: InMemorySpanExporter,
) -> None:
    with tracer().start_as_current_span("first"):
        first = enqueue("tests.record", idempotency_key="once").job
    with tracer().start_as_current_span("second"):
        again = enqueue("tests.record", idempotency_key="once")
    assert again.created is False and again.job.pk == first.pk
    one, two = named(finished(spans), "send default")
    assert stored(first) == {"traceparent": traceparent(one)}
    assert two.attributes is not None
    assert two.attributes[f"{SYSTEM}.jobs.created"] == 0
    assert two.attributes["messaging.message.id"] == str(first.pk)


def test_a_failed_enqueue_ends_its_send_span_with_the_error(spans: InMemorySpanExporter) -> None:
    from django_durable_jobs import InvalidJob

    with tracer().start_as_current_span("request"), pytest.raises(InvalidJob):
        enqueue("tests.record", depends_on=[uuid.uuid4()])
    (send,) = named(finished(spans), "send default")
    assert send.status.status_code is StatusCode.ERROR
    assert [event.name for event in send.events] == ["exception"]


def test_with_the_apis_tracer_alone_the_context_is_passed_on_without_spans(
    spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django_durable_jobs import tracing

    # What the API does without an SDK: a tracer that makes no spans.
    monkeypatch.setattr(tracing, "_tracer", trace.NoOpTracer())
    with tracer().start_as_current_span("request") as request:
        job = enqueue("tests.traced").job
        assert request.is_recording()  # the caller's span is not ended by enqueue
    # The current span's own context is stored, and the handler sees it as current.
    assert stored(job) == {"traceparent": traceparent(request)}  # type: ignore[arg-type]
    burst()
    job.refresh_from_db()
    assert job.result == {
        "trace_id": f"{request.get_span_context().trace_id:032x}",
        "span_id": f"{request.get_span_context().span_id:016x}",
    }
    assert [span.name for span in finished(spans)] == ["request", "handler work"]


def test_rest_enqueue_under_the_request_span(spans: InMemorySpanExporter) -> None:
    make_user("enqueuer", "add_job", "view_job")
    auth = base64.b64encode(f"enqueuer:{PASSWORD}".encode()).decode()
    # What OpenTelemetry's Django instrumentation does: the request's span
    # is current while the view runs (here, around the test client's call).
    with tracer().start_as_current_span("POST /api/jobs") as request:
        response = Client().post(
            "/api/jobs",
            data=json.dumps({"type": "example.echo", "payload": {"n": 1}, "idempotency_key": "r1"}),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Basic {auth}",
        )
    assert response.status_code == 201, response.content
    job = Job.objects.get(pk=response.json()["id"])
    (send,) = named(finished(spans), "send default")
    assert send.parent is not None and send.parent.span_id == request.get_span_context().span_id
    assert job.trace_context == {"traceparent": traceparent(send)}
    assert "trace_context" not in response.json()  # not part of the API's job


# --- attempts --------------------------------------------------------------------


def test_the_first_attempt_is_the_send_spans_child_and_the_handlers_spans_nest(
    spans: InMemorySpanExporter,
) -> None:
    with tracer().start_as_current_span("request"):
        job = enqueue("tests.traced", queue="emails", max_attempts=4).job
    burst()
    job.refresh_from_db()
    assert job.status == JobStatus.COMPLETED
    (send,) = named(finished(spans), "send emails")
    (process,) = process_spans(spans, job)
    assert process.name == "process emails"
    assert process.parent is not None
    assert process.parent.span_id == send.get_span_context().span_id  # type: ignore[union-attr]
    assert process.get_span_context().trace_id == send.get_span_context().trace_id  # type: ignore[union-attr]
    assert process.links == ()
    attributes = dict(process.attributes or {})
    worker_id = attributes.pop(f"{SYSTEM}.worker.id")
    assert isinstance(worker_id, str) and worker_id.startswith("test-")
    assert attributes == {
        "messaging.system": SYSTEM,
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": "emails",
        "messaging.message.id": str(job.pk),
        f"{SYSTEM}.job.type": "tests.traced",
        f"{SYSTEM}.job.attempt": 1,
        f"{SYSTEM}.job.max_attempts": 4,
        f"{SYSTEM}.job.outcome": "completed",
    }
    assert process.status.status_code is StatusCode.UNSET
    # The handler saw the attempt's span as current, and its own span nests under it.
    assert job.result == {
        "trace_id": f"{process.context.trace_id:032x}",  # type: ignore[union-attr]
        "span_id": f"{process.context.span_id:016x}",  # type: ignore[union-attr]
    }
    (work,) = named(finished(spans), "handler work")
    assert work.parent is not None and work.parent.span_id == process.context.span_id  # type: ignore[union-attr]


def test_a_retry_starts_a_trace_of_its_own_linked_to_the_send_span(
    spans: InMemorySpanExporter,
) -> None:
    with tracer().start_as_current_span("request"):
        job = enqueue("tests.traced", {"succeed_on": 2}, max_attempts=3).job
    settle(job)
    (send,) = named(finished(spans), "send default")
    first, second = process_spans(spans, job)
    send_context = send.get_span_context()
    assert send_context is not None
    # Attempt 1: the send span's child, failed, with the exception recorded.
    assert first.parent is not None and first.parent.span_id == send_context.span_id
    assert first.attributes is not None
    assert first.attributes[f"{SYSTEM}.job.outcome"] == "retry"
    assert first.attributes["error.type"] == "builtins.ValueError"
    assert first.status.status_code is StatusCode.ERROR
    assert first.status.description == "builtins.ValueError: attempt 1 fails"
    (event,) = first.events
    assert event.name == "exception"
    assert event.attributes is not None
    assert event.attributes["exception.type"] == "ValueError"
    assert event.attributes["exception.message"] == "attempt 1 fails"
    # Attempt 2: a root span in a new trace, linked to the send span.
    assert second.parent is None
    assert second.context.trace_id != send_context.trace_id  # type: ignore[union-attr]
    (link,) = second.links
    assert (link.context.trace_id, link.context.span_id) == (
        send_context.trace_id,
        send_context.span_id,
    )
    assert second.attributes is not None
    assert second.attributes[f"{SYSTEM}.job.attempt"] == 2
    assert second.attributes[f"{SYSTEM}.job.outcome"] == "completed"
    assert second.status.status_code is StatusCode.UNSET
    # Each attempt's handler span nests under that attempt's span.
    works = named(finished(spans), "handler work")
    assert {w.parent.span_id for w in works if w.parent} == {
        first.context.span_id,  # type: ignore[union-attr]
        second.context.span_id,  # type: ignore[union-attr]
    }


def test_the_last_failed_attempt_says_dead(spans: InMemorySpanExporter) -> None:
    job = enqueue("tests.fail_until", {"succeed_on": 99}, max_attempts=1).job
    burst()
    (process,) = process_spans(spans, job)
    assert process.parent is None and process.links == ()  # enqueued outside any trace
    assert process.attributes is not None
    assert process.attributes[f"{SYSTEM}.job.outcome"] == "dead"
    assert process.status.status_code is StatusCode.ERROR
    assert [event.name for event in process.events] == ["exception"]


def test_discard_and_cancel_outcomes(spans: InMemorySpanExporter) -> None:
    discarded = enqueue("tests.discard").job
    cancelled = enqueue("tests.cancellable", {"seconds": 30}).job
    running = RunningWorker(worker_config(burst=False))
    try:
        # Its handler started (it records an execution first), not only its claim: a job
        # claimed ahead and cancelled before a thread began it never runs, so it has no
        # attempt span (seen in CI on a loaded machine).
        wait_until(
            lambda: Execution.objects.filter(job_id=cancelled.pk).exists(),
            what="the cancellable job's handler to start",
        )
        cancel(cancelled.pk)
        wait_until(
            lambda: len(process_spans(spans, cancelled)) == 1, what="the cancelled attempt's span"
        )
    finally:
        running.stop()
    (dead,) = process_spans(spans, discarded)
    assert dead.attributes is not None
    assert dead.attributes[f"{SYSTEM}.job.outcome"] == "dead"
    assert dead.attributes["error.type"] == "django_durable_jobs.exceptions.Discard"
    (stopped,) = process_spans(spans, cancelled)
    assert stopped.attributes is not None
    assert stopped.attributes[f"{SYSTEM}.job.outcome"] == "cancelled"
    assert stopped.status.status_code is StatusCode.UNSET


def test_an_attempt_past_its_time_limit_says_what_the_worker_recorded(
    spans: InMemorySpanExporter,
) -> None:
    # The handler sleeps past its deadline and then returns: the watchdog
    # recorded the failed attempt (dead: no attempt left), and the span,
    # which ends when the handler returns, says so rather than "completed".
    job = enqueue("tests.sleep_in_c", {"sleep": 0.8}, timeout=0.2, max_attempts=1).job
    burst()
    wait_until(lambda: process_spans(spans, job), what="the attempt's span")
    assert Job.objects.get(pk=job.pk).status == JobStatus.DEAD
    (process,) = process_spans(spans, job)
    assert process.attributes is not None
    assert process.attributes[f"{SYSTEM}.job.outcome"] == "dead"
    assert process.attributes["error.type"] == "django_durable_jobs.exceptions.JobTimeout"
    assert process.status.status_code is StatusCode.ERROR


def test_an_async_handlers_spans_nest_under_its_attempt(spans: InMemorySpanExporter) -> None:
    with tracer().start_as_current_span("request"):
        job = enqueue("tests.atraced", {"succeed_on": 2}, max_attempts=2).job
    settle(job)
    job.refresh_from_db()
    assert job.status == JobStatus.COMPLETED
    (send,) = named(finished(spans), "send default")
    first, second = process_spans(spans, job)
    assert first.parent is not None
    assert first.parent.span_id == send.get_span_context().span_id  # type: ignore[union-attr]
    assert first.attributes is not None
    assert first.attributes[f"{SYSTEM}.job.outcome"] == "retry"
    assert first.status.description == "builtins.ValueError: async attempt 1 fails"
    assert [event.name for event in first.events] == ["exception"]
    assert second.parent is None and len(second.links) == 1
    # In the coroutine, the attempt's span was current, across its await.
    assert job.result == {
        "trace_id": f"{second.context.trace_id:032x}",  # type: ignore[union-attr]
        "span_id": f"{second.context.span_id:016x}",  # type: ignore[union-attr]
    }
    works = named(finished(spans), "handler work")
    assert sorted(w.parent.span_id for w in works if w.parent) == sorted(
        [first.context.span_id, second.context.span_id]  # type: ignore[union-attr]
    )


def test_a_django_task_continues_the_trace_of_its_enqueue(spans: InMemorySpanExporter) -> None:
    from tests.testapp import tasks

    with tracer().start_as_current_span("request"):
        result = tasks.traced.enqueue()
    job = Job.objects.get(pk=result.id)
    (send,) = named(finished(spans), "send default")
    assert job.trace_context == {"traceparent": traceparent(send)}
    burst()
    (process,) = process_spans(spans, job)
    assert process.parent is not None
    assert process.parent.span_id == send.get_span_context().span_id  # type: ignore[union-attr]
    assert process.attributes is not None
    assert process.attributes[f"{SYSTEM}.job.type"] == tasks.traced.module_path
    result.refresh()
    assert result.return_value == {
        "trace_id": f"{process.context.trace_id:032x}",  # type: ignore[union-attr]
        "span_id": f"{process.context.span_id:016x}",  # type: ignore[union-attr]
    }


# --- without OpenTelemetry -------------------------------------------------------

NO_OPENTELEMETRY = """
import sys
sys.modules["opentelemetry"] = None  # `import opentelemetry` now raises ImportError

import django
django.setup()

from django_durable_jobs import enqueue, tracing
from django_durable_jobs.models import Job, JobStatus
from django_durable_jobs.worker import Worker, WorkerConfig

assert tracing.AVAILABLE is False
job = enqueue("tests.record", {"n": 1}).job
assert Job.objects.get(pk=job.pk).trace_context is None
config = WorkerConfig(burst=True, concurrency=1, install_signal_handlers=False)
assert Worker(config).run() == 0
assert Job.objects.get(pk=job.pk).status == JobStatus.COMPLETED
loaded = sorted(name for name, module in sys.modules.items()
                if name.startswith("opentelemetry") and module is not None)
assert not loaded, loaded
print("ok")
"""


def test_without_opentelemetry_installed() -> None:
    from tests.e2e.helpers import queue_database_env, test_database_url

    result = subprocess.run(
        [sys.executable, "-c", NO_OPENTELEMETRY],
        cwd=ROOT,
        env={
            **os.environ,
            "DATABASE_URL": test_database_url(),
            **queue_database_env(),
            "DJANGO_SETTINGS_MODULE": "tests.e2e_settings",
            "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "example_project")]),
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
