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
