"""The database router that puts the queue on ``DURABLE_JOBS["DATABASE"]``.

Django consults only the routers listed in ``settings.DATABASE_ROUTERS``,
so the package cannot route its models by itself: a project that sets
``DATABASE`` adds this router (``durable_jobs.E013`` says so when it is
missing). Without ``DATABASE`` it has no opinion on anything, so listing it
is harmless, and a project's own router keeps working as before.
"""

from __future__ import annotations

from typing import Any

APP_LABEL = "durable_jobs"


def _queue_alias() -> str | None:
    from .conf import jobs_settings

    alias: str | None = jobs_settings.DATABASE
    return alias


class QueueRouter:
    """Routes the ``durable_jobs`` app to ``DURABLE_JOBS["DATABASE"]``, and only there.

    Reads and writes of the app's models go to that alias; its migrations
    run on that alias and on no other (``migrate --database=default``
    creates none of its tables). Other apps are left to the next router.
    """

    def db_for_read(self, model: type[Any], **hints: Any) -> str | None:
        if model._meta.app_label == APP_LABEL:
            return _queue_alias()
        return None

    def db_for_write(self, model: type[Any], **hints: Any) -> str | None:
        if model._meta.app_label == APP_LABEL:
            return _queue_alias()
        return None

    def allow_relation(self, obj1: Any, obj2: Any, **hints: Any) -> bool | None:
        labels = {obj1._meta.app_label, obj2._meta.app_label}
        if APP_LABEL in labels and _queue_alias() is not None:
            # A row of the queue and a row elsewhere live in two databases:
            # no foreign key can join them. Two queue rows always may.
            return labels == {APP_LABEL}
        return None

    def allow_migrate(
        self, db: str, app_label: str, model_name: str | None = None, **hints: Any
    ) -> bool | None:
        if app_label != APP_LABEL:
            return None
        alias = _queue_alias()
        if alias is None:
            return None
        return db == alias
