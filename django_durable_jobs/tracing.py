"""OpenTelemetry traces, when ``opentelemetry-api`` is installed (the ``otel`` extra).

The only module that imports OpenTelemetry, and only if it is there:
without it ``AVAILABLE`` is False, the callers test that one constant and
do nothing more (no span, no trace context stored, nothing imported).
``DURABLE_JOBS["TRACING"] = False`` turns it all off with the API installed.

Two sides, following OpenTelemetry's messaging semantic conventions:

- **Enqueue** (``send``): when a span is current (a request's, a task's),
  the insert runs under a ``PRODUCER`` span ``send <queue>``, and that
  span's W3C trace context (``traceparent``, ``tracestate``; never
  baggage, which may carry what the project would not want in a table)
  is stored with each job it creates, as JSON in ``Job.trace_context``.
  No current span: no span, NULL stored, nothing else done.
- **Attempt** (``process``): the worker runs each attempt under a
  ``CONSUMER`` span ``process <queue>``. On the first attempt its parent is
  the stored context, so the job's work shows in the trace of the request
  that enqueued it; a later attempt (a retry, minutes or hours on) starts a
  trace of its own with a *link* to that context, so a trace does not
  stretch over every retry. The span is the current one while the handler
  runs, sync or ``async def``, so the handler's own spans (and those of
  instrumented libraries: the ORM, HTTP clients) nest under it. It ends
  with the attempt's outcome as an attribute (``completed``, ``retry``,
  ``dead``, ``cancelled``...), and a failure's exception and ``ERROR``
  status.

``messaging.system`` is ``django_durable_jobs``: the conventions name the
system that carries the messages, and here that is this queue, not
PostgreSQL, whose ``postgresql`` belongs to the database client spans
(``db.system``) that psycopg's or Django's instrumentation already makes
for the same statements. Attributes of our own carry the same prefix.

The tracer and the propagator come from the API (the global tracer
provider): the project chooses the SDK, its exporters and its sampling.
Without an SDK the API's tracer makes no spans, and the worker only
passes a stored context on to the handler.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from .conf import jobs_settings

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError:  # the `otel` extra is not installed
    trace = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .db.records import ClaimedJob
    from .validation import JobSpec

__all__ = [
    "AVAILABLE",
    "SYSTEM",
    "AttemptSpan",
    "SendSpan",
    "start_attempt",
    "start_send",
]

#: Whether ``opentelemetry-api`` is importable; nothing here runs without it.
AVAILABLE = trace is not None
#: ``messaging.system`` of our spans, and the prefix of our own attributes.
SYSTEM = "django_durable_jobs"
TRACER_NAME = "django_durable_jobs"

# Our own attributes (no semantic convention has them).
JOB_TYPE = f"{SYSTEM}.job.type"
JOB_ATTEMPT = f"{SYSTEM}.job.attempt"
JOB_MAX_ATTEMPTS = f"{SYSTEM}.job.max_attempts"
JOB_OUTCOME = f"{SYSTEM}.job.outcome"
WORKER_ID = f"{SYSTEM}.worker.id"
#: On a ``send`` span: how many of its jobs are new (the others were replays).
JOBS_CREATED = f"{SYSTEM}.jobs.created"

T = TypeVar("T")

_propagator = TraceContextTextMapPropagator() if AVAILABLE else None
_tracer: Any = None


def _get_tracer() -> Any:
    # The global provider's tracer, once: before the project sets its
    # provider this is the API's proxy, which follows the provider set later.
    global _tracer
    if _tracer is None:
        from . import __version__

        _tracer = trace.get_tracer(TRACER_NAME, __version__)
    return _tracer


# -- enqueue ----------------------------------------------------------------


class SendSpan:
    """The ``send`` span of one insert, and the trace context its jobs store."""

    __slots__ = ("context_json", "owned", "span")

    def __init__(self, span: Any, context_json: str, *, owned: bool = True) -> None:
        self.span = span
        #: What ``Job.trace_context`` stores: ``{"traceparent": ..., "tracestate": ...}``.
        self.context_json = context_json
        #: Our own span, which ends with the insert (else the caller's, left alone).
        self.owned = owned

    @contextmanager
    def current(self) -> Iterator[SendSpan]:
        """The span is current (the insert's own database spans nest under it), then ends.

        An exception is recorded on the span, which ends with an ``ERROR`` status.
        """
        if not self.owned:
            yield self
            return
        with trace.use_span(self.span, end_on_exit=True):
            yield self

    def sent(self, message_id: str | None, created: int) -> None:
        """What the insert did: the job's id (one job), how many jobs are new."""
        if not self.owned:
            return
        if message_id is not None:
            self.span.set_attribute("messaging.message.id", message_id)
        self.span.set_attribute(JOBS_CREATED, created)


def start_send(specs: Sequence[JobSpec]) -> SendSpan | None:
    """A ``send`` span for inserting ``specs``, if a span is current; else None.

    None (nothing else done) also when ``TRACING`` is off. The span is
    started here and made current by ``SendSpan.current()``.
    """
    current = trace.get_current_span()
    if not current.get_span_context().is_valid or not jobs_settings.TRACING:
        return None
    queues = {spec.queue for spec in specs}
    types = {spec.type for spec in specs}
    queue = next(iter(queues)) if len(queues) == 1 else None
    attributes: dict[str, Any] = {
        "messaging.system": SYSTEM,
        "messaging.operation.type": "send",
        "messaging.operation.name": "send",
    }
    if queue is not None:
        attributes["messaging.destination.name"] = queue
    if len(types) == 1:
        attributes[JOB_TYPE] = next(iter(types))
    if len(specs) > 1:
        attributes["messaging.batch.message_count"] = len(specs)
    span = _get_tracer().start_span(
        "send" if queue is None else f"send {queue}",
        kind=trace.SpanKind.PRODUCER,
        attributes=attributes,
    )
    if not span.get_span_context().is_valid:
        # The global tracer makes no spans (no SDK set up globally) and the
        # current span came from elsewhere: store the current span's context.
        span = current
    # Without an SDK the API's tracer hands back the current span itself
    # when it is a non-recording one: its context is the one to store then.
    carrier: dict[str, str] = {}
    _propagator.inject(carrier, context=trace.set_span_in_context(span))  # type: ignore[union-attr]
    return SendSpan(span, json.dumps(carrier, separators=(",", ":")), owned=span is not current)


# -- attempts -------------------------------------------------------------


class AttemptSpan:
    """The ``process`` span of one attempt: current while its handler runs."""

    __slots__ = ("context", "raised", "span")

    def __init__(self, span: Any) -> None:
        self.span = span
        self.context = trace.set_span_in_context(span, otel_context.Context())
        #: What the handler raised, if it did (recorded on the span at the end).
        self.raised: BaseException | None = None

    @contextmanager
    def current(self) -> Iterator[None]:
        """Make the span current in this thread (a sync handler's call)."""
        token = otel_context.attach(self.context)
        try:
            yield
        except BaseException as exc:
            self.raised = exc
            raise
        finally:
            otel_context.detach(token)

    def bind(self, func: Callable[[Any], Awaitable[T]]) -> Callable[[Any], Awaitable[T]]:
        """``func`` (an ``async def`` handler) run with the span current in its task.

        The worker runs each async job's task in a fresh ``contextvars``
        context (``worker/event_loop.py``), so the span current in the slot
        thread does not reach it by itself.
        """
        context = self.context

        async def traced(ctx: Any) -> T:
            token = otel_context.attach(context)
            try:
                return await func(ctx)
            finally:
                otel_context.detach(token)

        return traced

    def end(
        self,
        outcome: str,
        failure: tuple[str, str] | None = None,
        error: BaseException | None = None,
    ) -> None:
        """End the span: ``outcome`` (``completed``, ``retry``, ``dead``, ``cancelled``,
        ``released``, ``lease_lost``, ``suspended``) and, for a failed attempt,
        ``failure`` as ``(error.type, description)``.

        ``error``: an exception that escaped the attempt (else what the
        handler raised, if anything), recorded with the failure.
        """
        span = self.span
        span.set_attribute(JOB_OUTCOME, outcome)
        if failure is not None:
            span.set_attribute("error.type", failure[0])
            exc = error if error is not None else self.raised
            if exc is not None:
                span.record_exception(exc, escaped=error is not None)
            span.set_status(trace.Status(trace.StatusCode.ERROR, failure[1]))
        span.end()


#: ``_no_sdk``'s answer and when it was last asked for (``time.monotonic``).
_provider_set = False
_no_provider_checked_at = float("-inf")
#: How long "no provider" is believed: one set later is seen within this.
NO_PROVIDER_RECHECK_SECONDS = 1.0


def _no_sdk() -> bool:
    """Whether no tracer provider is set: the API's proxy (or no-op) makes no spans.

    Asked once per attempt, and ``trace.get_tracer_provider()`` reads
    ``os.environ`` each time while none is set, so "none" is remembered for a
    second. A provider, once set, stays (OpenTelemetry sets it only once).
    """
    global _provider_set, _no_provider_checked_at
    if _provider_set:
        return False
    now = time.monotonic()
    if now - _no_provider_checked_at < NO_PROVIDER_RECHECK_SECONDS:
        return True
    provider = trace.get_tracer_provider()
    if isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider)):
        _no_provider_checked_at = now
        return True
    _provider_set = True
    return False


def forget_provider_check() -> None:
    """Ask ``trace.get_tracer_provider()`` again at the next attempt (a provider was set)."""
    global _provider_set, _no_provider_checked_at
    _provider_set = False
    _no_provider_checked_at = float("-inf")


def _parent(job: ClaimedJob) -> tuple[Any, Any]:
    """``(parent context, links)`` of an attempt's span (see the module docstring)."""
    creation = None
    if isinstance(job.trace_context, dict):
        extracted = _propagator.extract(job.trace_context)  # type: ignore[union-attr]
        span_context = trace.get_current_span(extracted).get_span_context()
        if span_context.is_valid:
            creation = (extracted, span_context)
    # An empty context, not the slot thread's current one: a root span
    # unless the job's own context says otherwise.
    if creation is None:
        return otel_context.Context(), None
    if job.attempt <= 1:
        return creation[0], None
    return otel_context.Context(), [trace.Link(creation[1])]


def start_attempt(job: ClaimedJob, worker_id: str) -> AttemptSpan | None:
    """The ``process`` span of ``job``'s attempt, started now; None if traces are off.

    None too when the tracer makes no span and the job carries no context
    to pass on (the API without an SDK).
    """
    if job.trace_context is None and _no_sdk():
        # The API alone, and nothing to pass on: the span would be an invalid
        # no-op one, and building it (its attributes, the proxy tracer) costs
        # a few microseconds a job. Tested before the setting, which costs one too.
        return None
    if not jobs_settings.TRACING:
        return None
    parent, links = _parent(job)
    span = _get_tracer().start_span(
        f"process {job.queue}",
        context=parent,
        kind=trace.SpanKind.CONSUMER,
        attributes={
            "messaging.system": SYSTEM,
            "messaging.operation.type": "process",
            "messaging.operation.name": "process",
            "messaging.destination.name": job.queue,
            "messaging.message.id": str(job.id),
            JOB_TYPE: job.type,
            JOB_ATTEMPT: job.attempt,
            JOB_MAX_ATTEMPTS: job.max_attempts,
            WORKER_ID: worker_id,
        },
        links=links,
    )
    if not span.get_span_context().is_valid:
        return None
    return AttemptSpan(span)
