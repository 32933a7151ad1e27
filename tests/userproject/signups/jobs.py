from __future__ import annotations

from django.core.mail import send_mail

from django_durable_jobs import JobContext, job

from .models import Signup


@job("emails.welcome", queue="emails")
def welcome(ctx: JobContext) -> dict[str, bool]:
    """Send the welcome email, then mark the signup welcomed."""
    send_mail("Welcome!", "Thanks for signing up.", "shop@example.com", [ctx.payload["to"]])
    Signup.objects.filter(pk=ctx.payload["signup"]).update(welcomed=True)
    return {"sent": True}
