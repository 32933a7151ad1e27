"""The shop's tests with pytest: the ``durable_jobs`` fixture of the package's plugin."""

from __future__ import annotations

from pathlib import Path

import pytest

from django_durable_jobs import enqueue


def test_signup_enqueues_the_welcome_email(client, durable_jobs):
    client.post("/signup/", {"email": "ada@example.com"})
    durable_jobs.assert_enqueued(type="emails.welcome", payload={"to": "ada@example.com"})
    (ran,) = durable_jobs.run()
    assert ran.status == "completed"


def test_a_miss_lists_what_was_enqueued_instead(durable_jobs):
    enqueue("emails.welcome", {"to": "ADA@example.com"})
    with pytest.raises(AssertionError) as raised:
        durable_jobs.assert_enqueued(
            type="emails.welcome", payload={"to": "ada@example.com"}, count=1
        )
    expected = (Path(__file__).parent / "expected" / "a_miss.txt").read_text()
    assert f"AssertionError: {raised.value}\n" == expected
