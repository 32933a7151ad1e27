"""A Django task tested with the helpers, as docs/guides/testing.md ("Django Tasks") shows."""

from __future__ import annotations

from django.test import TestCase

from django_durable_jobs.testing import assert_enqueued, run_jobs
from signups.tasks import send_welcome  # @task def send_welcome(user_id: int) -> str


class WelcomeTaskTests(TestCase):
    def test_the_welcome_task_runs(self):
        result = send_welcome.enqueue(42)

        assert_enqueued(type="signups.tasks.send_welcome", payload={"args": [42]})
        (ran,) = run_jobs()
        self.assertEqual(ran.status, "completed")
        self.assertEqual(send_welcome.get_result(result.id).return_value, "sent")
