"""What the claim does to a suspended job that runs again (durable steps, issue 24)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from django_durable_jobs.models import JobStatus
from tests.factories import claim_directly, make_job

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_due_sleeper_claimed_again_no_longer_shows_what_it_waited_for() -> None:
    # As ctx.sleep leaves it: pending, due at its wake time, why in waiting_for.
    woke_at = timezone.now() - timedelta(seconds=1)
    job = make_job(status=JobStatus.PENDING, available_at=woke_at,
                   waiting_for={"until": woke_at.isoformat()})  # fmt: skip
    claimed = claim_directly()
    assert claimed.id == job.pk
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING
    assert job.waiting_for is None
