from __future__ import annotations

from django.test import TestCase

from django_durable_jobs.testing import assert_enqueued, assert_not_enqueued, run_jobs


class SignupTests(TestCase):
    def test_signup_enqueues_the_welcome_email_and_it_sends(self):
        self.client.post("/signup/", {"email": "ada@example.com"})

        # payload matches a subset: other keys may be there too.
        assert_enqueued(type="emails.welcome", payload={"to": "ada@example.com"}, count=1)
        assert_not_enqueued(type="emails.reminder")

        (ran,) = run_jobs()
        self.assertEqual(ran.status, "completed")
        self.assertEqual(ran.result, {"sent": True})
