"""The OpenAPI schema at /api/schema/ is valid and describes every endpoint."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from drf_spectacular.validation import validate_schema

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def schema(django_db_blocker: Any) -> dict[str, Any]:
    with django_db_blocker.unblock():
        response = Client().get("/api/schema/", {"format": "json"})
    assert response.status_code == 200
    document: dict[str, Any] = response.json()
    return document


def test_the_schema_validates(schema: dict[str, Any]) -> None:
    validate_schema(schema)  # raises on an invalid document


def test_every_endpoint_is_described(schema: dict[str, Any]) -> None:
    paths = schema["paths"]
    expected = {
        "/api/jobs/": {"get", "post"},
        "/api/jobs/{id}/": {"get"},
        "/api/jobs/{id}/requeue/": {"post"},
        "/api/jobs/{id}/cancel/": {"post"},
        "/api/jobs/stats/": {"get"},
        "/api/schedules/": {"get"},
        "/api/health/": {"get"},
    }
    for path, methods in expected.items():
        assert methods <= set(paths[path]), path


def test_request_and_response_bodies_are_described(schema: dict[str, Any]) -> None:
    create = schema["paths"]["/api/jobs/"]["post"]
    body = create["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    request = schema["components"]["schemas"][body.rsplit("/", 1)[1]]
    assert {"type", "payload", "idempotency_key", "delay_seconds", "run_at"} <= set(
        request["properties"]
    )
    assert request["required"] == ["type"]
    assert {"200", "201", "400", "401", "403", "409", "413", "415"} <= set(create["responses"])
    job = schema["components"]["schemas"]["JobDetail"]["properties"]
    assert {"id", "status", "result", "errors", "payload"} <= set(job)
    for action in ("requeue", "cancel"):
        responses = schema["paths"][f"/api/jobs/{{id}}/{action}/"]["post"]["responses"]
        assert {"200", "404", "409"} <= set(responses)
    assert "503" in schema["paths"]["/api/health/"]["get"]["responses"]
    schedules = schema["paths"]["/api/schedules/"]["get"]["responses"]
    assert {"200", "401", "403"} <= set(schedules)
    items = schedules["200"]["content"]["application/json"]["schema"]
    assert items["type"] == "array"
    schedule = schema["components"]["schemas"][items["items"]["$ref"].rsplit("/", 1)[1]]
    assert {"name", "last_tick", "last_job_id", "last_job_status", "next_tick"} <= set(
        schedule["properties"]
    )


def test_each_queue_s_limits_and_held_back_jobs_are_described(schema: dict[str, Any]) -> None:
    components = schema["components"]["schemas"]
    held = components["HeldBack"]
    assert held["required"] == ["concurrency", "key", "paused", "rate_limit"]
    assert {field["type"] for field in held["properties"].values()} == {"integer"}
    for name in ("Queue", "QueueStats"):
        queue = components[name]["properties"]
        assert queue["held_back"]["allOf"] == [{"$ref": "#/components/schemas/HeldBack"}], name
        assert queue["limits"]["allOf"] == [{"$ref": "#/components/schemas/QueueLimits"}], name
        assert queue["limits"]["nullable"] is True, name
