"""After migrate and one `runjobworker --burst`: what a user of the wheel sees.

Run as `python check.py enqueue` (before the worker) and `python check.py verify` (after).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "smoke.settings")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import django

django.setup()

import django_durable_jobs  # noqa: E402
from django_durable_jobs import enqueue, metrics  # noqa: E402
from django_durable_jobs.models import Job  # noqa: E402

KEY = "wheel-smoke-1"


def fail(message: str) -> None:
    print(f"check.py: {message}", file=sys.stderr)
    sys.exit(1)


def where() -> None:
    package = Path(django_durable_jobs.__file__).resolve().parent
    if "site-packages" not in package.parts:
        fail(f"django_durable_jobs imported from {package}, not from the installed wheel")
    if not (package / "py.typed").exists():
        fail("py.typed is missing from the installed package")
    print(f"django_durable_jobs from {package}; Django {django.get_version()}")


def enqueue_one() -> None:
    result = enqueue("smoke.echo", {"hello": "wheel"}, idempotency_key=KEY)
    print(f"enqueued {result.job.pk} (created={result.created})")


def verify() -> None:
    from django.contrib.auth import get_user_model
    from django.test import Client

    job = Job.objects.get(idempotency_key=KEY)
    if job.status != "completed" or job.result != {"hello": "wheel"}:
        fail(f"the job is {job.status} with result {job.result!r}, not completed by the worker")
    if not metrics.ENABLED:
        fail("the metrics extra is installed but django_durable_jobs.metrics is disabled")

    user_model = get_user_model()
    admin = user_model.objects.filter(username="admin").first() or (
        user_model.objects.create_superuser("admin", "admin@example.com", "admin")
    )
    client = Client()
    client.force_login(admin)
    page = client.get("/admin/durable_jobs/job/")
    if page.status_code != 200 or b"smoke.echo" not in page.content:
        fail(f"the admin's job list answered {page.status_code} without the job")
    detail = client.get(f"/admin/durable_jobs/job/{job.pk}/change/")
    if detail.status_code != 200:
        fail(f"the admin's job page answered {detail.status_code}")
    api = client.get("/api/jobs")
    if api.status_code != 200 or api.json()["results"][0]["id"] != str(job.pk):
        fail(f"GET /api/jobs answered {api.status_code}")
    print("admin job list, job page and GET /api/jobs render from the installed wheel")


if __name__ == "__main__":
    where()
    {"enqueue": enqueue_one, "verify": verify}[sys.argv[1]]()
