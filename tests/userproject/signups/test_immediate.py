"""The immediate mode (``RUN_IMMEDIATELY``), in a ``TestCase`` and with pytest."""

from __future__ import annotations

from django.core import mail
from django.test import TestCase, override_settings

from .models import Signup


@override_settings(DURABLE_JOBS={"RUN_IMMEDIATELY": True})
class ImmediateSignupTests(TestCase):
    def test_the_welcome_email_is_sent_when_the_signup_commits(self):
        with self.captureOnCommitCallbacks(execute=True):
            self.client.post("/signup/", {"email": "ada@example.com"})

        self.assertEqual(len(mail.outbox), 1)
        self.assertTrue(Signup.objects.get(email="ada@example.com").welcomed)


def test_the_welcome_email_is_sent_on_commit(
    db, client, settings, django_capture_on_commit_callbacks, mailoutbox
):
    settings.DURABLE_JOBS = {"RUN_IMMEDIATELY": True}
    with django_capture_on_commit_callbacks(execute=True):
        client.post("/signup/", {"email": "ada@example.com"})
    assert [message.to for message in mailoutbox] == [["ada@example.com"]]
