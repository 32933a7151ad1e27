"""The example app's one model: what ``example.checkout``'s atomic step writes."""

from __future__ import annotations

from django.db import models


class Receipt(models.Model):
    """One row per recorded order. ``order`` is not unique on purpose: a step that
    ran twice would show as two receipts for one order."""

    order = models.CharField(max_length=100)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"receipt {self.pk} for {self.order}"


class JobOutcome(models.Model):
    """One row per ``job_finished`` signal, written by ``example.receivers``.

    Only when the example project runs with ``EXAMPLE_RECORD_OUTCOMES=1``:
    a receiver connected to ``job_finished`` makes every worker build the
    signal's arguments and write a row per outcome, which the benchmarks,
    run on the example project, must not measure.
    """

    job_id = models.UUIDField(db_index=True)
    type = models.CharField(max_length=255)
    outcome = models.CharField(max_length=16)
    recorded_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.type} {self.job_id}: {self.outcome}"
