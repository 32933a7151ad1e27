"""Enqueue a few example jobs; running it again adds none (idempotency keys)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from django_durable_jobs import enqueue_many

DEMO_JOBS: list[dict[str, Any]] = [
    {"type": "example.noop", "idempotency_key": "demo-noop"},
    {"type": "example.echo", "payload": {"hello": "world"}, "idempotency_key": "demo-echo"},
    {"type": "example.sleep", "payload": {"seconds": 2}, "idempotency_key": "demo-sleep"},
    {
        "type": "example.flaky",
        "payload": {"succeed_on_attempt": 2},
        "idempotency_key": "demo-flaky",
    },
    {"type": "example.fail", "idempotency_key": "demo-fail"},
    {
        "type": "example.echo",
        "payload": {"later": True},
        "delay": 30,
        "idempotency_key": "demo-delayed",
    },
    {"type": "example.noop", "priority": 10, "idempotency_key": "demo-urgent"},
]


DEMO_ADMIN = ("admin", "admin")


class Command(BaseCommand):
    help = (
        "Create the demo's admin user (admin/admin) if missing and enqueue the example "
        "jobs (idempotent: a second run adds nothing). For the demo database only."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        from django.contrib.auth import get_user_model

        username, password = DEMO_ADMIN
        User = get_user_model()
        if not User.objects.filter(username=username).exists():
            User.objects.create_superuser(username, f"{username}@example.com", password)
            self.stdout.write(f"Created superuser {username!r} with password {password!r}.")
        results = enqueue_many(DEMO_JOBS)
        for result in results:
            job = result.job
            state = "new" if result.created else "already there"
            self.stdout.write(f"  {job.type:<14} {job.id}  {state}")
        created = sum(r.created for r in results)
        self.stdout.write(self.style.SUCCESS(f"{created} new job(s), {len(results)} in the demo."))
