"""Spans of the tracing tests: OpenTelemetry's SDK with an in-memory exporter.

The tracer provider is global and can be set only once per process, so it
is set at the first test that asks for ``captured_spans()`` and stays; it
hands spans to the exporter only while a capture is on, so the other
tests' workers (whose attempts make spans too, once a provider is set)
leave nothing behind.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from django_durable_jobs import tracing

_exporter = InMemorySpanExporter()
_lock = threading.Lock()
_installed = False


class _WhileCapturing(SimpleSpanProcessor):
    capturing = False

    def on_end(self, span: ReadableSpan) -> None:
        if self.capturing:
            super().on_end(span)


_processor = _WhileCapturing(_exporter)


def _install() -> None:
    global _installed
    with _lock:
        if not _installed:
            provider = TracerProvider()
            provider.add_span_processor(_processor)
            trace.set_tracer_provider(provider)
            # An attempt in the last second may have found none (tracing._no_sdk).
            tracing.forget_provider_check()
            _installed = True


@contextmanager
def captured_spans() -> Iterator[InMemorySpanExporter]:
    """The spans that end inside the block (``exporter.get_finished_spans()``)."""
    _install()
    _exporter.clear()
    _processor.capturing = True
    try:
        yield _exporter
    finally:
        _processor.capturing = False
        _exporter.clear()


def tracer() -> trace.Tracer:
    """A tracer of the tests' own (the provider installed)."""
    _install()
    return trace.get_tracer("tests")


def named(spans: Iterable[ReadableSpan], name: str) -> list[ReadableSpan]:
    """The spans called ``name``, in the order they ended."""
    return [span for span in spans if span.name == name]
