"""``path("api/", include("django_durable_jobs.api.urls"))``.

Every route takes an optional trailing slash (``/?``), so ``/api/jobs`` and
``/api/jobs/`` both resolve and no POST is ever redirected by
``APPEND_SLASH``.
"""

from __future__ import annotations

from django.urls import re_path
from rest_framework.routers import SimpleRouter

from .views import (
    AuditViewSet,
    EventViewSet,
    HealthView,
    JobViewSet,
    QueueViewSet,
    ScheduleViewSet,
)

app_name = "durable_jobs_api"

router = SimpleRouter()
router.trailing_slash = "/?"
router.register("jobs", JobViewSet, basename="job")
router.register("schedules", ScheduleViewSet, basename="schedule")
router.register("queues", QueueViewSet, basename="queue")
router.register("audit", AuditViewSet, basename="audit")
router.register("events", EventViewSet, basename="event")

urlpatterns = [
    re_path(r"^health/?$", HealthView.as_view(), name="health"),
    *router.urls,
]
