"""Typed bases of the admin classes.

Generic in django-stubs only: at run time these classes take no type
arguments, so the parametrised bases exist for the type checker alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.contrib import admin
from django.core.paginator import Paginator

from ..models import AuditEntry, Job, QueueState, ScheduleState, WorkerProcess

if TYPE_CHECKING:
    from django.db.models import Model

    BasePaginator = Paginator[Model]
    JobModelAdmin = admin.ModelAdmin[Job]
    WorkerModelAdmin = admin.ModelAdmin[WorkerProcess]
    ScheduleModelAdmin = admin.ModelAdmin[ScheduleState]
    QueueModelAdmin = admin.ModelAdmin[QueueState]
    AuditModelAdmin = admin.ModelAdmin[AuditEntry]
else:
    BasePaginator = Paginator
    JobModelAdmin = WorkerModelAdmin = ScheduleModelAdmin = QueueModelAdmin = admin.ModelAdmin
    AuditModelAdmin = admin.ModelAdmin

__all__ = [
    "AuditModelAdmin",
    "BasePaginator",
    "JobModelAdmin",
    "QueueModelAdmin",
    "ScheduleModelAdmin",
    "WorkerModelAdmin",
]
