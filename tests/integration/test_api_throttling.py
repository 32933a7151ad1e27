"""Throttles at the REST door: failed authentications per address (on by default),
and DRF's throttles, off until a project switches them on.

A wrong HTTP Basic password costs about half a second of password hashing
in production (even for an unknown user): without a limit, anyone who can
reach the API can keep the web server's CPUs busy (issue 22).
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest
from django.conf import settings
from django.contrib.auth.hashers import MD5PasswordHasher
from django.test import Client, override_settings
from rest_framework.authtoken.models import Token
from rest_framework.throttling import ScopedRateThrottle

from django_durable_jobs.api import throttling
from django_durable_jobs.conf import jobs_settings
from django_durable_jobs.models import Job, JobStatus
from tests.factories import PASSWORD, Api, make_operator
from tests.factories import basic_auth as basic

from .helpers import assert_error, job_body, make_echo_job

pytestmark = pytest.mark.django_db


class CountingHasher(MD5PasswordHasher):
    """MD5 (fast), counting every password it hashes or checks."""

    algorithm = "counting_md5"
    calls: ClassVar[int] = 0

    def encode(self, password: str, salt: str) -> str:
        type(self).calls += 1
        return super().encode(password, salt)

    def verify(self, password: str, encoded: str) -> bool:
        type(self).calls += 1
        return super().verify(password, encoded)


#: A moment one second into a fixed window of every length the tests use (1 s to 1 h).
WINDOW_START = 3600.0 * 480_000 + 1.0


@pytest.fixture(autouse=True)
def one_window(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test's requests fall in one fixed window (``throttling.clock`` stands still):
    on the real clock, failures counted in a window's last seconds were forgiven by the
    next one before the test's refused request (seen in CI on a loaded machine)."""
    monkeypatch.setattr(throttling, "clock", lambda: WINDOW_START)


@pytest.fixture
def hasher() -> Iterator[type[CountingHasher]]:
    with override_settings(PASSWORD_HASHERS=[f"{__name__}.CountingHasher"]):
        CountingHasher.calls = 0
        yield CountingHasher


def rate(value: str | None) -> Any:
    return override_settings(DURABLE_JOBS={**settings.DURABLE_JOBS, "API_FAILED_AUTH_RATE": value})


def wrong(username: str = "staff") -> dict[str, str]:
    token = base64.b64encode(f"{username}:not-{PASSWORD}".encode()).decode()
    return {"HTTP_AUTHORIZATION": f"Basic {token}"}


def test_failed_authentications_are_throttled_by_default() -> None:
    assert jobs_settings.API_FAILED_AUTH_RATE == "10/m"
    user = make_operator("staff")
    client = Client()
    for _ in range(10):
        assert_error(client.get("/api/jobs", **wrong()), 401, "authentication_failed")
    assert_error(client.get("/api/jobs", **basic(user)), 429, "too_many_failed_authentications")


def test_after_n_failures_even_the_right_password_is_a_429_without_hashing(
    hasher: type[CountingHasher],
) -> None:
    user = make_operator("staff")
    job = make_echo_job(JobStatus.DEAD)
    client = Client()
    with rate("3/m"):
        for name in ("staff", "staff", "nobody"):  # an unknown user counts (and hashes) too
            assert_error(client.get("/api/jobs", **wrong(name)), 401, "authentication_failed")
        hashed = hasher.calls
        assert hashed >= 3
        response = Api(user).post(f"/api/jobs/{job.pk}/requeue")
        body = assert_error(response, 429, "too_many_failed_authentications")
        assert "API_FAILED_AUTH_RATE" in body["detail"]
        assert 1 <= int(response["Retry-After"]) <= 60
        assert hasher.calls == hashed  # no password was checked
        assert Job.objects.get(pk=job.pk).status == JobStatus.DEAD
        assert_error(client.get("/api/jobs", **wrong()), 429, "too_many_failed_authentications")
        assert hasher.calls == hashed


def test_another_address_is_not_affected(hasher: type[CountingHasher]) -> None:
    user = make_operator("staff")
    client = Client()
    with rate("2/m"):
        for _ in range(2):
            assert client.get("/api/jobs", **wrong()).status_code == 401
        assert client.get("/api/jobs", **basic(user)).status_code == 429
        other = client.get("/api/jobs", REMOTE_ADDR="192.0.2.7", **basic(user))
        assert other.status_code == 200, other.content


def test_the_next_window_lets_the_address_in_again(
    hasher: type[CountingHasher], monkeypatch: pytest.MonkeyPatch
) -> None:
    user = make_operator("staff")
    client = Client()
    now = throttling.clock()
    monkeypatch.setattr(throttling, "clock", lambda: now)
    with rate("2/m"):
        for _ in range(2):
            assert client.get("/api/jobs", **wrong()).status_code == 401
        refused = client.get("/api/jobs", **basic(user))
        assert refused.status_code == 429
        wait = int(refused["Retry-After"])
        monkeypatch.setattr(throttling, "clock", lambda: now + wait)
        assert client.get("/api/jobs", **basic(user)).status_code == 200


def test_wrong_tokens_count_as_failures_too() -> None:
    user = make_operator("robot")
    token = Token.objects.create(user=user)
    client = Client()
    with rate("2/m"):
        for _ in range(2):
            response = client.get("/api/jobs", HTTP_AUTHORIZATION="Token nope")
            assert_error(response, 401, "authentication_failed")
        response = client.get("/api/jobs", HTTP_AUTHORIZATION=f"Token {token.key}")
        assert_error(response, 429, "too_many_failed_authentications")


def test_successes_and_anonymous_requests_do_not_count() -> None:
    user = make_operator("staff")
    client = Client()
    with rate("2/m"):
        for _ in range(5):
            assert client.get("/api/jobs", **basic(user)).status_code == 200
            assert client.get("/api/jobs").status_code == 401  # no credentials: no failure
        assert client.get("/api/jobs", **basic(user)).status_code == 200


def test_none_turns_the_limit_off() -> None:
    user = make_operator("staff")
    client = Client()
    with rate(None):
        for _ in range(20):
            assert client.get("/api/jobs", **wrong()).status_code == 401
        assert client.get("/api/jobs", **basic(user)).status_code == 200


def test_behind_a_proxy_the_forwarded_address_is_counted() -> None:
    """With ``NUM_PROXIES`` set, the address is the proxy's X-Forwarded-For entry."""
    user = make_operator("staff")
    client = Client()
    rest = {**settings.REST_FRAMEWORK, "NUM_PROXIES": 1}
    guesser = {"HTTP_X_FORWARDED_FOR": "203.0.113.9"}
    with rate("2/m"), override_settings(REST_FRAMEWORK=rest):
        for _ in range(2):
            assert client.get("/api/jobs", **guesser, **wrong()).status_code == 401
        assert client.get("/api/jobs", **guesser, **basic(user)).status_code == 429
        other = client.get("/api/jobs", HTTP_X_FORWARDED_FOR="203.0.113.10", **basic(user))
        assert other.status_code == 200


def test_health_is_never_throttled() -> None:
    client = Client()
    with rate("1/m"):
        assert client.get("/api/jobs", **wrong()).status_code == 401
        assert client.get("/api/jobs", **wrong()).status_code == 429
        assert client.get("/api/health").status_code == 200


# --- DRF's throttles: off by default, ready to switch on ---------------------------------

SCOPED = {"API_THROTTLE_CLASSES": ["rest_framework.throttling.ScopedRateThrottle"]}


@pytest.fixture
def scoped_rates(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """DEFAULT_THROTTLE_RATES, for a test to fill: DRF's throttles read it once, at import."""
    rates: dict[str, str] = {}
    monkeypatch.setattr(ScopedRateThrottle, "THROTTLE_RATES", rates)
    rest = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": rates}
    with (
        override_settings(REST_FRAMEWORK=rest),
        override_settings(DURABLE_JOBS={**settings.DURABLE_JOBS, **SCOPED}),
    ):
        yield rates


def test_no_drf_throttle_by_default() -> None:
    assert jobs_settings.API_THROTTLE_CLASSES is None
    staff = Api(make_operator("staff"))
    for _ in range(30):
        assert staff.get("/api/jobs").status_code == 200


def test_a_scoped_rate_answers_429_with_retry_after_once_used_up(
    scoped_rates: dict[str, str],
) -> None:
    scoped_rates["durable_jobs"] = "2/min"
    staff = Api(make_operator("staff"))
    assert staff.get("/api/jobs").status_code == 200
    assert staff.get("/api/queues").status_code == 200
    response = staff.get("/api/jobs/stats")
    assert_error(response, 429, "throttled")
    assert 1 <= int(response["Retry-After"]) <= 60
    # Other scopes have no rate here: not throttled.
    assert staff.post("/api/jobs", job_body("after")).status_code == 201
    assert staff.post("/api/queues/default/pause").status_code == 200


def test_each_kind_of_call_has_its_own_scope(scoped_rates: dict[str, str]) -> None:
    scoped_rates.update({"durable_jobs_enqueue": "1/min", "durable_jobs_operate": "1/min"})
    staff = Api(make_operator("staff"))
    assert staff.post("/api/jobs", job_body("a")).status_code == 201
    assert_error(staff.post("/api/jobs", job_body("b")), 429, "throttled")
    assert staff.post("/api/queues/default/pause").status_code == 200
    assert_error(staff.post("/api/queues/default/resume"), 429, "throttled")
    assert staff.get("/api/jobs").status_code == 200  # reads: no rate, not throttled
    assert not Job.objects.filter(idempotency_key="b").exists()
