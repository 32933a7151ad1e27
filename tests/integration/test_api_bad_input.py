"""Bad input to the REST API: a 400 naming the field, never a 500.

One test per bug the fuzzing of issue 16 found (tests/fuzz/: schemathesis
on the API, hypothesis on enqueue()), or that writing the schema's rules
down showed: each answered 500 (or refused a value the schema allows)
before its fix.
"""

from __future__ import annotations

import base64
import json
import uuid
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

import pytest
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from django_durable_jobs import enqueue
from django_durable_jobs.models import Job, QueueState
from tests.factories import Api

from .helpers import assert_error, job_body

pytestmark = pytest.mark.django_db


def raw_post(api: Api, path: str, text: str) -> Any:
    """POST ``text`` as it is: json.dumps() would refuse to write a lone surrogate."""
    return api.post(path, text.encode("ascii"))


# --- filters and pages ------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"type": "a\x00b"}, "type"),
        ({"queue": "q\x00"}, "queue"),
        ({"queue": "not a queue"}, "queue"),
        ({"type": " padded"}, "type"),
        ({"type": ""}, "type"),
    ],
)
def test_a_filter_no_job_can_match_is_a_400(staff: Api, query: dict[str, str], field: str) -> None:
    # A NUL reached PostgreSQL, which refuses it in text: a 500.
    body = assert_error(staff.get("/api/jobs?" + urlencode(query)), 400, "invalid")
    assert list(body["detail"]) == [field]


@pytest.mark.parametrize("page_size", ["\u00b2", "\u0661", "9" * 5000, "-1", "1e3", "", "0"])
def test_a_page_size_that_is_not_1_to_1000_in_ascii_digits_is_a_400(
    staff: Api, page_size: str
) -> None:
    # '²'.isdigit() is True and int('²') raises; so do 5,000 digits: 500s before.
    body = assert_error(
        staff.get("/api/jobs?" + urlencode({"page_size": page_size})), 400, "invalid"
    )
    assert list(body["detail"]) == ["page_size"]


def test_a_page_size_with_leading_zeros_is_that_page_size(staff: Api) -> None:
    enqueue("tests.thing")
    response = staff.get("/api/jobs?page_size=" + "0" * 5000 + "7")
    assert response.status_code == 200, response.content


@pytest.mark.parametrize("position", ["not a time", "2030-01-01T00:00:00\x00", "2030-13-45"])
def test_a_cursor_whose_position_is_no_time_is_a_400(staff: Api, position: str) -> None:
    # DRF decodes the (client-made) cursor and filters created_at by its position;
    # Django's ValidationError on a position that is no time was a 500.
    cursor = base64.b64encode(f"o=0&p={position}".encode()).decode()
    body = assert_error(staff.get("/api/jobs?" + urlencode({"cursor": cursor})), 400, "invalid")
    assert list(body["detail"]) == ["cursor"]


def test_a_cursor_a_page_gave_still_works(staff: Api) -> None:
    for _ in range(3):
        enqueue("tests.thing")
    first = staff.get("/api/jobs?page_size=2").json()
    second = staff.client.get(first["next"], **staff.auth)
    assert second.status_code == 200, second.content
    assert len(second.json()["results"]) == 1


# --- POST /api/jobs -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ('{"type": "example.echo", "idempotency_key": "\\ud800"}', "body"),
        ('{"type": "example.echo", "idempotency_key": "k", "payload": {"a": "\\udfff"}}', "body"),
        ('{"type": "example.echo", "idempotency_key": "k", "payload": {"\\ud800x": 1}}', "body"),
    ],
)
def test_a_lone_surrogate_escape_in_the_body_is_a_400(staff: Api, text: str, field: str) -> None:
    # json.loads() takes "\ud800" alone; psycopg could not encode the key
    # (UnicodeEncodeError) and jsonb refused the payload (DataError): 500s.
    body = assert_error(raw_post(staff, "/api/jobs", text), 400, "parse_error")
    assert list(body["detail"]) == [field]
    assert Job.objects.count() == 0


def test_a_surrogate_pair_escape_is_the_character_it_spells(staff: Api) -> None:
    text = '{"type": "example.echo", "idempotency_key": "k\\ud83d\\ude00", "payload": {}}'
    response = raw_post(staff, "/api/jobs", text)
    assert response.status_code == 201, response.content
    assert response.json()["idempotency_key"] == "k\U0001f600"


@pytest.mark.parametrize(
    "run_at", ["0001-01-01T00:00:00+05:00", "9999-12-31T23:00:00-05:00", "0001-01-01T12:00:00Z"]
)
def test_a_run_at_on_the_first_or_last_day_python_holds_is_a_400(staff: Api, run_at: str) -> None:
    # In UTC the first two are in year 0 and year 10000: PostgreSQL refused them (500).
    body = assert_error(staff.post("/api/jobs", job_body(run_at=run_at)), 400, "invalid")
    assert list(body["detail"]) == ["run_at"]


@pytest.mark.parametrize(
    ("run_at", "utc"),
    [
        # Offsets Python allows and PostgreSQL does not (past 15:59): a 500 before.
        ("2030-01-01T00:00:00+20:00", "2029-12-31T04:00:00+00:00"),
        ("2030-01-01T00:00:00-23:59", "2030-01-01T23:59:00+00:00"),
        # RFC 3339's lower-case t and z (JSON Schema's date-time): a 400 before.
        ("2030-01-01t00:00:00z", "2030-01-01T00:00:00+00:00"),
    ],
)
def test_a_run_at_in_any_rfc_3339_form_is_that_instant(staff: Api, run_at: str, utc: str) -> None:
    response = staff.post("/api/jobs", job_body(run_at=run_at))
    assert response.status_code == 201, response.content
    assert Job.objects.get(pk=response.json()["id"]).available_at.isoformat() == utc


@pytest.mark.parametrize(
    "item", [f"urn:uuid:{uuid.uuid4()}", "{" + str(uuid.uuid4()) + "}", uuid.uuid4().hex]
)
def test_depends_on_takes_job_ids_as_json_schema_s_uuid_format_writes_them(
    staff: Api, item: str
) -> None:
    # uuid.UUID() also reads these; the schema's format is 8-4-4-4-12 hex digits.
    body = assert_error(staff.post("/api/jobs", job_body(depends_on=[item])), 400, "invalid")
    assert "not a job id" in body["detail"]["depends_on"][0]


def test_depends_on_of_more_items_than_the_schema_allows_is_a_400(staff: Api) -> None:
    parent = str(enqueue("tests.thing").job.pk)
    body = assert_error(
        staff.post("/api/jobs", job_body(depends_on=[parent] * 10_001)), 400, "invalid"
    )
    assert "at most 10000" in body["detail"]["depends_on"][0]


def test_a_payload_float_that_jsonb_reads_back_as_an_int_replays(staff: Api) -> None:
    body = job_body("floats", payload={"f": 1.2345678901234567e30})
    first = staff.post("/api/jobs", body)
    again = staff.post("/api/jobs", json.loads(json.dumps(body)))
    assert (first.status_code, again.status_code) == (201, 200), again.content


def test_on_parent_failure_run_without_depends_on_is_stored(staff: Api) -> None:
    first = staff.post("/api/jobs", job_body("opf", on_parent_failure="run"))
    assert first.status_code == 201, first.content
    assert first.json()["on_parent_failure"] == "run"
    again = staff.post("/api/jobs", job_body("opf", on_parent_failure="run"))
    assert again.status_code == 200, again.content


# --- POST /api/queues/{name}/pause ---------------------------------------------------


def test_a_pause_until_an_offset_postgresql_refuses_is_that_instant(staff: Api) -> None:
    # Found by schemathesis' stateful phase: "+23:08" was a DataError, a 500.
    until = (timezone.now() + timedelta(days=400)).replace(microsecond=0)
    text = until.astimezone(timezone.get_fixed_timezone(23 * 60 + 8)).isoformat()
    response = staff.post("/api/queues/parked/pause", {"until": text})
    assert response.status_code == 200, response.content
    assert parse_datetime(response.json()["paused_until"]) == until
    assert QueueState.objects.get(name="parked").paused_until == until


@pytest.mark.parametrize("until", ["9999-12-31T23:00:00-05:00", "9999-12-31T00:00:00Z"])
def test_a_pause_until_the_last_day_python_holds_is_a_400(staff: Api, until: str) -> None:
    # The first is in the year 10000 in UTC: a 500 before.
    body = assert_error(staff.post("/api/queues/parked/pause", {"until": until}), 400, "invalid")
    assert list(body["detail"]) == ["until"]
    assert not QueueState.objects.filter(name="parked").exists()


def test_pause_queue_for_longer_than_a_datetime_holds_is_invalid_pause() -> None:
    from django_durable_jobs.exceptions import InvalidPause
    from django_durable_jobs.pausing import pause_queue

    with pytest.raises(InvalidPause, match="after the year 9999"):
        pause_queue("parked", timedelta(days=10**8))
