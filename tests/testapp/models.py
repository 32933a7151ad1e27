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


class StepRun(models.Model):
    """One row per call of a durable step's function (tests.three_steps, tests.atomic_steps).

    Written inside the step's function: a step replayed from its record
    writes none, so the rows count the real runs of each step of each job.
    """

    job_id = models.UUIDField(db_index=True)
    step = models.CharField(max_length=100)
    attempt = models.PositiveIntegerField()
    worker = models.CharField(max_length=255)
    #: tests.step_sleeper: how many of its handlers this process was running then.
    active = models.PositiveIntegerField(null=True)
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        app_label = "testapp"

    def __str__(self) -> str:
        return f"{self.job_id} {self.step} attempt {self.attempt}"


class StepCall(models.Model):
    """One row per call of a durable step's function: lets the steps' tests count calls."""

    job_id = models.UUIDField(db_index=True)
    name = models.CharField(max_length=100)
    attempt = models.PositiveIntegerField()

    class Meta:
        app_label = "testapp"

    def __str__(self) -> str:
        return f"{self.job_id} {self.name} attempt {self.attempt}"
