"""docs/reference/openapi.yaml is the schema the API serves, not a stale copy."""

from __future__ import annotations

from pathlib import Path

from django.core.management import call_command

COMMITTED = Path(__file__).resolve().parents[2] / "docs" / "reference" / "openapi.yaml"
REGENERATE = (
    "DATABASE_URL=... python example_project/manage.py spectacular "
    "--file docs/reference/openapi.yaml"
)


def test_committed_openapi_schema_is_up_to_date(tmp_path: Path) -> None:
    generated = tmp_path / "openapi.yaml"
    call_command("spectacular", "--file", str(generated))
    assert COMMITTED.exists(), f"docs/reference/openapi.yaml is missing; run: {REGENERATE}"
    assert generated.read_text() == COMMITTED.read_text(), (
        f"The API changed but docs/reference/openapi.yaml did not; run: {REGENERATE}"
    )


def test_committed_schema_describes_every_endpoint() -> None:
    text = COMMITTED.read_text()
    for path in (
        "/api/jobs/:",
        "/api/jobs/{id}/:",
        "/api/jobs/{id}/requeue/:",
        "/api/jobs/{id}/cancel/:",
        "/api/jobs/stats/:",
        "/api/schedules/:",
        "/api/queues/:",
        "/api/queues/{name}/pause/:",
        "/api/queues/{name}/resume/:",
        "/api/events/:",
        "/api/health/:",
    ):
        assert f"\n  {path}\n" in text, path


def test_every_operation_declares_the_databases_503() -> None:
    """The API answers a database it cannot reach with a JSON 503 (database_unavailable,
    Retry-After) on every operation; the schema says so, so that clients and
    schemathesis expect it. /api/health/ has its own 503, a Health body."""
    import yaml

    schema = yaml.safe_load(COMMITTED.read_text())
    error = {"$ref": "#/components/schemas/Error"}
    operations = [
        (path, method, operation)
        for path, item in schema["paths"].items()
        for method, operation in item.items()
    ]
    assert len(operations) >= 11
    for path, method, operation in operations:
        unavailable = operation["responses"].get("503")
        assert unavailable is not None, f"{method.upper()} {path} declares no 503"
        if path == "/api/health/":
            continue
        assert "database_unavailable" in unavailable["description"], (method, path)
        assert "Retry-After" in unavailable["headers"], (method, path)
        body = unavailable["content"]["application/json"]["schema"]
        assert body == error or error in body.get("anyOf", []), (method, path, body)
