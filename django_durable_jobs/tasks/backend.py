"""``DurableJobsBackend``: Django's Tasks framework on the durable job table.

A ``@task`` enqueued here is a ``Job`` row like any other (same worker,
admin, API and metrics), inserted by ``enqueueing.enqueue`` on the
caller's connection, so it commits or rolls back with the caller's
transaction. Settings name it
``django_durable_jobs.tasks.backend.DurableJobsBackend``, for
``django.tasks`` on Django 6 and for the ``django-tasks`` backport on
Django 5.2 alike (``compat`` says which is in use). With neither,
importing this module raises ``ImproperlyConfigured`` saying what to
install (not a bare ``ModuleNotFoundError``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Mapping
from functools import partial
from typing import Any

from django.apps import apps
from django.core import checks
from django.db import transaction
from django.utils.module_loading import import_string

from .. import db
from ..constants import MAX_ATTEMPTS_LIMIT, QUEUE_MAX_LENGTH
from ..enqueueing import enqueue
from ..exceptions import InvalidJob
from ..models import Job
from ..validation import validate_max_attempts, validate_queue, validate_timeout, validate_type
from . import compat, limits
from .options import current_task_options

# Before the names below: with no Tasks API, say what is needed, once, here.
compat.require("django_durable_jobs.tasks.backend.DurableJobsBackend")

from .compat import (  # noqa: E402
    BaseTaskBackend,
    InvalidTask,
    Task,
    TaskResult,
    TaskResultDoesNotExist,
    task_backends,
    task_enqueued,
)
from .results import (  # noqa: E402
    NotRoundTrippable,
    build_result,
    check_round_trip,
    is_task_payload,
    resolve_task,
    send_signal,
)

#: The keys ``OPTIONS`` accepts.
OPTION_KEYS = frozenset({"max_attempts", "timeout", limits.OPTION})

E101 = "TASKS[{alias!r}]['QUEUES'] holds an invalid queue name: {name!r}."
E101_HINT = (
    f"Queue names use letters, digits, '_', '-' and '.', at most {QUEUE_MAX_LENGTH} characters."
)
E102 = "TASKS[{alias!r}]['OPTIONS'] must be a dict, got {kind}."
E103 = "TASKS[{alias!r}]['OPTIONS'][{key!r}] is not a known option."
E104 = (
    "TASKS[{alias!r}]['OPTIONS']['max_attempts'] must be an integer from 1 to {limit}, "
    "got {value!r}."
)
E106 = (
    "TASKS[{alias!r}]['OPTIONS']['timeout'] must be a positive number of seconds or a "
    "timedelta, got {value!r}."
)
E107_HINT = (
    "Map each task's module path (its jobs' type, e.g. 'myapp.tasks.sync_customer') to "
    "the most of its jobs sharing one concurrency key that may run at once."
)
E105 = (
    "TASKS[{alias!r}] uses DurableJobsBackend, but 'django_durable_jobs' is not in INSTALLED_APPS."
)


class DurableJobsBackend(BaseTaskBackend):
    """Run Django ``@task`` functions on django-durable-jobs' queue.

    ``OPTIONS``: ``{"max_attempts": n}``, how many times a task runs before
    it is ``FAILED`` (default: ``DURABLE_JOBS["DEFAULT_MAX_ATTEMPTS"]``);
    ``{"timeout": seconds}``, each attempt's time limit (default:
    ``DURABLE_JOBS["TIMEOUT_SECONDS"]``); ``{"concurrency_limits": {path: n}}``,
    at most ``n`` jobs of the task ``path`` sharing one concurrency key run
    at once (``limits.py``). Per call, ``task_options(idempotency_key=...,
    max_attempts=..., timeout=..., concurrency_key=...)``.
    """

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def validate_task(self, task: Task[Any, Any]) -> None:
        """Django's checks, plus what a job row needs (a storable type and queue)."""
        if not isinstance(task, Task):
            # A backport task on Django 6 (both read TASKS, so its @task reaches
            # this backend): the worker would never find it as a Task.
            api = type(task).__module__.partition(".")[0]
            raise InvalidTask(
                f"{task.module_path} is declared with {api}'s @task, but this process uses "
                f"{compat.TASKS_MODULE} (tasks/compat.py): import task from "
                f"{compat.TASKS_MODULE}."
            )
        super().validate_task(task)
        # The rules enqueue() applies to every job, checked here so a bad
        # task fails where it is declared (or re-targeted with .using()),
        # not at its first enqueue.
        try:
            validate_type(task.module_path)
        except InvalidJob as exc:
            raise InvalidTask(
                f"Task path {task.module_path!r} cannot be a job type: {exc.message}"
            ) from None
        try:
            validate_queue(task.queue_name)
        except InvalidJob as exc:
            raise InvalidTask(
                f"Invalid queue_name for task {task.module_path}: {exc.message}"
            ) from None

    def enqueue(
        self, task: Task[Any, Any], args: Iterable[Any], kwargs: Mapping[str, Any]
    ) -> TaskResult[Any, Any]:
        """Insert ``task`` as a job; with ``task_options(idempotency_key=...)``, maybe replay.

        Arguments must survive a JSON round trip unchanged (checked here,
        naming the argument). Inside ``transaction.atomic()`` the job, and
        the ``task_enqueued`` signal, wait for the caller's commit.
        """
        self.validate_task(task)
        self._check_importable(task)
        args, kwargs = list(args), dict(kwargs)
        named = [(f"args[{i}]", value) for i, value in enumerate(args)]
        named += [(f"kwargs[{name!r}]", value) for name, value in kwargs.items()]
        for field, value in named:
            try:
                check_round_trip(f"{task.module_path} argument {field}", value)
            except NotRoundTrippable as exc:
                raise InvalidJob(field, str(exc)) from None
        options = current_task_options()
        alias = db.database_alias()
        enqueued = enqueue(
            task.module_path,
            {"args": args, "kwargs": kwargs, "backend": self.alias},
            idempotency_key=options.idempotency_key,
            queue=task.queue_name,
            priority=task.priority,
            max_attempts=(
                options.max_attempts
                if options.max_attempts is not None
                else self.options.get("max_attempts")
            ),
            run_at=task.run_after,
            timeout=options.timeout if options.timeout is not None else self.options.get("timeout"),
            concurrency_key=options.concurrency_key,
            using=alias,
        )
        result = build_result(enqueued.job, task, self.alias)
        if enqueued.created:
            # After the commit: receivers must never see a task that a
            # rollback then removes. Outside a transaction: at once.
            transaction.on_commit(
                partial(send_signal, task_enqueued, type(self), result), using=alias
            )
        return result

    def get_result(self, result_id: str) -> TaskResult[Any, Any]:
        """The task's current state, read from its job row."""
        try:
            job_id = uuid.UUID(str(result_id))
        except ValueError:
            raise TaskResultDoesNotExist(result_id) from None
        job = Job.objects.using(db.database_alias()).filter(pk=job_id).first()
        if job is None or not is_task_payload(job.payload) or job.payload["backend"] != self.alias:
            raise TaskResultDoesNotExist(result_id)
        task = resolve_task(job.type)
        if task is None:
            raise TaskResultDoesNotExist(
                f"{result_id}: its type {job.type!r} no longer names a task."
            )
        return build_result(job, task, self.alias)

    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        """E101-E107: queue names, ``OPTIONS`` and the app being installed."""
        return [*super().check(**kwargs), *self._own_checks()]

    def _own_checks(self) -> Iterator[checks.CheckMessage]:
        if not apps.is_installed("django_durable_jobs"):
            yield checks.Error(
                E105.format(alias=self.alias),
                hint="Add 'django_durable_jobs' to INSTALLED_APPS and run migrate.",
                id="durable_jobs.E105",
            )
        for name in sorted(self.queues, key=str):
            try:
                validate_queue(name)
            except InvalidJob:
                yield checks.Error(
                    E101.format(alias=self.alias, name=name),
                    hint=E101_HINT,
                    id="durable_jobs.E101",
                )
        if not isinstance(self.options, Mapping):
            yield checks.Error(
                E102.format(alias=self.alias, kind=type(self.options).__name__),
                id="durable_jobs.E102",
            )
            return
        for key in sorted(set(self.options) - OPTION_KEYS, key=str):
            yield checks.Error(
                E103.format(alias=self.alias, key=key),
                hint=f"Known options: {', '.join(sorted(OPTION_KEYS))}.",
                id="durable_jobs.E103",
            )
        if "max_attempts" in self.options:
            try:
                validate_max_attempts(self.options["max_attempts"])
            except InvalidJob:
                yield checks.Error(
                    E104.format(
                        alias=self.alias,
                        limit=MAX_ATTEMPTS_LIMIT,
                        value=self.options["max_attempts"],
                    ),
                    id="durable_jobs.E104",
                )
        if "timeout" in self.options:
            try:
                validate_timeout(self.options["timeout"])
            except InvalidJob:
                yield checks.Error(
                    E106.format(alias=self.alias, value=self.options["timeout"]),
                    id="durable_jobs.E106",
                )
        if limits.OPTION in self.options:
            for problem in limits.problems(self, self._durable_backends_before()):
                yield checks.Error(
                    limits.describe(self.alias, problem), hint=E107_HINT, id="durable_jobs.E107"
                )

    def _durable_backends_before(self) -> list[BaseTaskBackend]:
        """The ``DurableJobsBackend``s declared before this one in ``TASKS``."""
        before: list[BaseTaskBackend] = []
        for backend in task_backends.all():
            if backend.alias == self.alias:
                break
            if isinstance(backend, DurableJobsBackend):
                before.append(backend)
        return before

    def _check_importable(self, task: Task[Any, Any]) -> None:
        # The worker finds the task by importing its module path: a Task
        # bound to another name (``add = task(_add)``) would never run.
        try:
            found = import_string(task.module_path)
        except ImportError:
            found = None
        if not isinstance(found, Task) or found.func is not task.func:
            raise InvalidTask(
                f"{task.module_path} does not import as this task: the worker loads a task "
                "by its function's module path, so decorate the function with @task where "
                "it is defined, at module level."
            )
