from __future__ import annotations

from django.db import models


class Execution(models.Model):
    """One row per handler execution: lets tests count runs exactly."""

    job_id = models.UUIDField(db_index=True)
    attempt = models.PositiveIntegerField()
    worker = models.CharField(max_length=255)
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        app_label = "testapp"

    def __str__(self) -> str:
        return f"{self.job_id} attempt {self.attempt}"
