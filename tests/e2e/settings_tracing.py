"""Worker settings for tests/e2e/test_tracing.py: the e2e settings, and OpenTelemetry's SDK
exporting every span as a JSON line to the file ``E2E_SPANS_FILE`` names.

What a project does in its settings (or its ``wsgi.py``): set the global
tracer provider; the worker's spans go to whatever exporter it has.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from tests.e2e_settings import *  # noqa: F403


class JsonLinesExporter(SpanExporter):
    """Each span as one JSON line: ids in hex, as the W3C traceparent writes them."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = [json.dumps(_as_dict(span)) + "\n" for span in spans]
        with self.lock, open(self.path, "a", encoding="utf-8") as out:
            out.writelines(lines)
        return SpanExportResult.SUCCESS


def _as_dict(span: ReadableSpan) -> dict[str, object]:
    context = span.get_span_context()
    assert context is not None
    return {
        "name": span.name,
        "kind": span.kind.name,
        "trace_id": f"{context.trace_id:032x}",
        "span_id": f"{context.span_id:016x}",
        "parent_span_id": None if span.parent is None else f"{span.parent.span_id:016x}",
        "links": [
            {"trace_id": f"{link.context.trace_id:032x}", "span_id": f"{link.context.span_id:016x}"}
            for link in span.links
        ],
        "attributes": dict(span.attributes or {}),
        "status": span.status.status_code.name,
        "events": [event.name for event in span.events],
    }


_provider = TracerProvider()
_provider.add_span_processor(SimpleSpanProcessor(JsonLinesExporter(os.environ["E2E_SPANS_FILE"])))
trace.set_tracer_provider(_provider)
