"""``manage.py jobs``: inspect and act on the queue without writing SQL.

A thin shell: it parses and checks input, then calls ``operations`` (requeue,
cancel, retry from a step), ``bulk`` (``--all``), ``pausing`` (pause, resume),
``events`` (emit), ``pruning`` and ``api.stats``, the same
code as the admin and the REST API. Every subcommand takes ``--json`` for scripts. Bad input raises
``CommandError`` (exit status 1) rather than an argparse error (status 2), so
that a script sees one failure code whatever was wrong.

The readable output shows job data that anyone allowed to enqueue wrote (a
REST client's idempotency key, type or payload, a handler's error), on the
operator's terminal: ``printable`` escapes the characters a terminal would
act on instead of showing. ``--json`` is exact JSON, whose strings escape
them already.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.core.exceptions import PermissionDenied
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from ... import audit, bulk, db, doctor, events, operations, pausing, pruning, step_records
from ...api.stats import job_stats, queue_overview
from ...authorization import (
    AUDIT_READ_PERMISSION,
    READ_PERMISSIONS,
    Actor,
    is_active_user,
)
from ...conf import jobs_settings
from ...durations import format_duration, parse_duration
from ...exceptions import EventConflict, InvalidEvent, InvalidPause
from ...flow import describe_limits
from ...held_back import describe_held_back
from ...models import AuditAction, Job, JobStatus, QueueState
from ...schedules.overview import schedule_overview

DEFAULT_LIMIT = 50
MAX_LIMIT = 10_000
#: The options of ``requeue --all`` / ``cancel --all`` by ``bulk.JobFilter`` field.
BULK_OPTIONS = {
    "status": "--status",
    "queue": "--queue",
    "type": "--type",
    "created_after": "--created-after",
    "created_before": "--created-before",
    "error_contains": "--error-contains",
    "batch_size": "--batch-size",
}
LIST_COLUMNS = ("id", "type", "queue", "status", "attempts", "created_at")
AUDIT_COLUMNS = ("at", "actor", "door", "action", "job_id", "queue", "details")
#: Subcommands that change jobs or queues -> the action whose permission they need
#: (``--all`` runs need the bulk one, the same permission).
OPERATOR_SUBCOMMANDS = {
    "requeue": "requeue",
    "cancel": "cancel",
    "pause": "pause",
    "resume": "resume",
    "emit": "emit",
}
#: ``jobs doctor``'s table of what holds back the vacuum horizon.
HOLDER_COLUMNS = ("kind", "pid/slot/gid", "application", "user", "state", "since", "held",
                  "xid age")  # fmt: skip
STEP_COLUMNS = ("name", "kind", "status", "attempt", "started_at", "duration", "result/error")
#: The environment variable that names the Django user, as ``--user`` does.
USER_ENV = "DURABLE_JOBS_USER"

#: Characters a terminal acts on rather than shows, and their escapes: C0 and
#: C1 controls and DEL (ESC begins the sequences that clear the screen, move
#: the cursor, retitle the window or write to the clipboard; CR lets a line
#: overwrite itself), the bidirectional controls (text that displays otherwise
#: than it reads) and Unicode's line and paragraph separators.
_BIDI_AND_SEPARATORS = (0x061C, 0x200E, 0x200F, 0x2028, 0x2029, *range(0x202A, 0x202F),
                        *range(0x2066, 0x206A))  # fmt: skip
_ESCAPES = {
    **{code: f"\\x{code:02x}" for code in (*range(0x20), 0x7F, *range(0x80, 0xA0))},
    **{code: f"\\u{code:04x}" for code in _BIDI_AND_SEPARATORS},
    ord("\t"): "\\t",
    ord("\n"): "\\n",
    ord("\r"): "\\r",
}
#: The same, keeping line breaks and tabs (a traceback's lines stay lines).
_ESCAPES_KEEPING_LINES = {
    code: escape for code, escape in _ESCAPES.items() if code not in (ord("\n"), ord("\t"))
}


def printable(value: object, *, lines: bool = False) -> str:
    """``value`` as text that is safe to print on a terminal, for a human to read.

    Each character a terminal would act on is shown as its escape instead
    (``\\x1b``, ``\\r``, ``\\u202e``), so a job's data cannot clear the
    screen, hide a line or rewrite what the operator sees. With ``lines``,
    line breaks and tabs are kept (a traceback); otherwise they are escaped
    too (a table cell or a field stays on its line). Backslashes are left as
    they are: the text is for reading, ``--json`` is for exact values.
    """
    text = "" if value is None else str(value)
    return text.translate(_ESCAPES_KEEPING_LINES if lines else _ESCAPES)


def parse_ids(values: Sequence[str]) -> list[uuid.UUID]:
    ids = []
    for value in values:
        try:
            ids.append(uuid.UUID(value))
        except ValueError:
            raise CommandError(f"{value!r} is not a job id (a UUID)", returncode=1) from None
    return list(dict.fromkeys(ids))


def parse_int(value: Any, option: str, *, low: int, high: int) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise CommandError(f"{option}: {value!r} is not a whole number", returncode=1) from None
    if not low <= number <= high:
        raise CommandError(f"{option}: must be from {low} to {high}, got {number}", returncode=1)
    return number


def _iso(value: Any) -> Any:
    return value.isoformat() if hasattr(value, "isoformat") else value


def job_summary(job: Job) -> dict[str, Any]:
    return {
        "id": str(job.pk),
        "type": job.type,
        "queue": job.queue,
        "status": job.status,
        "priority": job.priority,
        "attempts": job.attempts,
        "max_attempts": job.max_attempts,
        "created_at": _iso(job.created_at),
        "available_at": _iso(job.available_at),
        "completed_at": _iso(job.completed_at),
    }


def job_detail(job: Job) -> dict[str, Any]:
    steps = step_records.job_steps(job)
    return {
        **job_summary(job),
        "idempotency_key": job.idempotency_key,
        "timeout": job.timeout,
        "payload": job.payload,
        "started_at": _iso(job.started_at),
        "updated_at": _iso(job.updated_at),
        "lease_holder": job.lease_holder,
        "lease_expires_at": _iso(job.lease_expires_at),
        "cancel_requested_at": _iso(job.cancel_requested_at),
        "on_parent_failure": job.on_parent_failure,
        "waiting_on": job.waiting_on,
        "depends_on": [str(parent) for parent in job.parent_ids()],
        "dependents": [str(child) for child in job.dependent_ids()],
        "last_error": job.last_error,
        "errors": job.errors,
        "result": job.result,
        "waiting_for": step_records.waiting_for(job),
        "steps": [step_records.step_as_dict(step) for step in steps.rows],
        "steps_truncated": steps.truncated,
    }


def _step_row(step: dict[str, Any]) -> list[Any]:
    started, finished = parse_datetime(step["started_at"] or ""), None
    if step["finished_at"]:
        finished = parse_datetime(step["finished_at"])
    duration = f"{(finished - started).total_seconds():.3f}s" if started and finished else "-"
    outcome = step["error"] or f"{step['result_bytes']} bytes"
    # The first line of an error: a cell stays on its line (the rest is in --json).
    first_line = outcome.splitlines()[0] if outcome else ""
    return [
        step["name"],
        step["kind"],
        step["status"],
        step["attempt"],
        step["started_at"],
        duration,
        first_line,
    ]


def _parse_time(text: str, option: str = "--until") -> datetime:
    """An ISO 8601 time with a UTC offset (a naive time is refused, not guessed)."""
    try:
        parsed = parse_datetime(text.strip())
    except ValueError:
        parsed = None
    if parsed is None:
        raise CommandError(
            f"{option}: {text!r} is not an ISO 8601 date and time, e.g. 2026-12-01T12:00Z",
            returncode=1,
        )
    if timezone.is_naive(parsed):
        raise CommandError(
            f"{option}: {text!r} has no UTC offset; add Z or +hh:mm (a naive time is ambiguous)",
            returncode=1,
        )
    return parsed


def _parse_moment(text: str, option: str) -> datetime:
    """``--created-before``/``--created-after``: an ISO 8601 time, or a duration ago (``7d``)."""
    try:
        ago = parse_duration(text)
    except ValueError:
        return _parse_time(text, option)
    return timezone.now() - ago


def _add_bulk_options(command: CommandParser, operation: str, statuses: Sequence[str]) -> None:
    """``--all`` and the filters of a bulk requeue or cancel (``bulk.JobFilter``)."""
    command.add_argument(
        "--all",
        action="store_true",
        help=f"Instead of ids: {operation} every job matching the options below, in batches.",
    )
    command.add_argument(
        "--status",
        help=f"With --all: jobs in this status, {' or '.join(statuses)} (default: {statuses[0]}).",
    )
    command.add_argument("--type", help="With --all: only jobs of this type.")
    command.add_argument("--queue", help="With --all: only jobs in this queue.")
    command.add_argument(
        "--created-after",
        metavar="TIME",
        help="With --all: only jobs created at or after TIME (ISO 8601 with a UTC offset, or "
        "a duration ago: 12h, 7d).",
    )
    command.add_argument(
        "--created-before",
        metavar="TIME",
        help="With --all: only jobs created before TIME (ISO 8601 with a UTC offset, or a "
        "duration ago: 12h, 7d).",
    )
    command.add_argument(
        "--error-contains",
        metavar="TEXT",
        help="With --all: only jobs whose last error contains TEXT (case-insensitive).",
    )
    command.add_argument(
        "--batch-size",
        help=f"With --all: jobs per transaction, at most {bulk.MAX_BATCH_SIZE} "
        f"(default: {bulk.DEFAULT_BATCH_SIZE}).",
    )


def _paused_text(entry: dict[str, Any]) -> str:
    if not entry.get("paused"):
        return ""
    until = entry.get("paused_until")
    return "yes" if until is None else f"until {_iso(until)}"


def _queue_data(name: str) -> dict[str, Any]:
    (queue,) = queue_overview(only=name)
    return {**queue, "paused_until": _iso(queue["paused_until"])}


def table(rows: Iterable[Sequence[Any]], headers: Sequence[str]) -> str:
    """A plain left-aligned text table (no dependency, copy-paste friendly), cells escaped."""
    text_rows = [[printable(cell) for cell in row] for row in rows]
    headers = [printable(header) for header in headers]
    widths = [len(h) for h in headers]
    for row in text_rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in [list(headers), ["-" * w for w in widths], *text_rows]
    ]
    return "\n".join(lines)


def doctor_text(reading: doctor.Reading, findings: list[doctor.Finding]) -> str:
    """``jobs doctor``'s readable report: the horizon, the tables, the queues, the findings."""
    holder = doctor.oldest_holder(reading)
    if holder is None or not holder.age_seconds:
        horizon = "Vacuum horizon: not held back by any session or prepared transaction"
    else:
        horizon = (
            f"Vacuum horizon: held for {doctor.describe_seconds(holder.age_seconds)} by "
            f"{doctor.describe_holder(holder)}"
        )
    parts = [horizon]
    if reading.holders:
        parts.append(
            table(
                (
                    [
                        h.kind,
                        h.holder,
                        h.application_name or "",
                        h.usename or "",
                        h.state or "",
                        _iso(h.since) or "",
                        "-" if h.age_seconds is None else doctor.describe_seconds(h.age_seconds),
                        "-" if h.xid_age is None else f"{h.xid_age:,}",
                    ]
                    for h in reading.holders
                ),
                HOLDER_COLUMNS,
            )
        )
    parts.append(
        table(
            (
                [
                    t.table,
                    f"{t.live:,}",
                    f"{t.dead:,}",
                    f"{t.dead_ratio:.1%}",
                    "never"
                    if t.vacuum_age_seconds is None
                    else f"{doctor.describe_seconds(t.vacuum_age_seconds)} ago",
                    "on" if t.autovacuum_enabled and reading.settings.autovacuum else "off",
                ]
                for t in reading.tables
            ),
            ("table", "live", "dead", "dead %", "last vacuum", "autovacuum"),
        )
    )
    oldest = reading.oldest_pending or {}
    if oldest:
        queue, age = max(oldest.items(), key=lambda item: item[1])
        parts.append(f"Oldest runnable pending job: {doctor.describe_seconds(age)} (queue {queue})")
    else:
        parts.append("Oldest runnable pending job: none")
    needed = sum(1 for f in findings if f.severity == doctor.OPERATOR)
    if findings:
        lines = [f"Findings ({needed} need{'s' if needed == 1 else ''} an operator):"]
        for finding in findings:
            lines.append(f"[{finding.severity}] {finding.text}")
            lines.append(f"    what to do: {finding.advice}")
        parts.append("\n".join(lines))
    parts.append("Something needs an operator." if needed else "Nothing needs an operator.")
    return "\n\n".join(parts)


class Command(BaseCommand):
    help = (
        "Inspect and manage durable jobs: stats, list, show, requeue, cancel, prune, "
        "schedules, pause, resume, emit, audit, doctor."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="subcommand", metavar="SUBCOMMAND", required=True)

        def add(name: str, help_text: str) -> CommandParser:
            command = sub.add_parser(name, help=help_text, description=help_text)
            command.add_argument("--json", action="store_true", help="Print JSON for scripts.")
            command.add_argument(
                "--user",
                metavar="USERNAME",
                help=(
                    "Act as this Django user: its permissions are checked (as in the admin "
                    f"and the REST API) and the audit trail names it (default: ${USER_ENV}; "
                    "without either, the OS login is recorded and nothing is checked, unless "
                    "DURABLE_JOBS['CLI_REQUIRE_USER'])."
                ),
            )
            return command

        add(
            "stats",
            "Job counts by status and by queue, the oldest pending job's wait, and each "
            "queue's limits, pause and the runnable jobs they hold back.",
        )

        listing = add("list", "List jobs, newest first.")
        listing.add_argument(
            "--status", help="Only jobs in this status (pending, running, waiting, ...)."
        )
        listing.add_argument("--type", help="Only jobs of this type.")
        listing.add_argument("--queue", help="Only jobs in this queue.")
        listing.add_argument(
            "--limit",
            default=DEFAULT_LIMIT,
            help=f"How many jobs to show, at most {MAX_LIMIT} (default: %(default)s).",
        )

        show = add(
            "show",
            "Everything about one job, its error history, steps and what it waits for included.",
        )
        show.add_argument("id", help="The job's id.")

        requeue = add("requeue", "Put dead or cancelled jobs back to pending, attempts reset.")
        requeue.add_argument("ids", nargs="*", metavar="ID", help="Ids of the jobs to requeue.")
        requeue.add_argument(
            "--from-step",
            metavar="NAME",
            help=(
                "Retry one job from this step (a name `jobs show` lists): its record and "
                "every later one are forgotten, so the next run calls those steps again "
                "(default: keep every record)."
            ),
        )
        requeue.add_argument(
            "--all-dead",
            action="store_true",
            help="Requeue every dead job matching the options (in batches): --all --status dead.",
        )
        _add_bulk_options(requeue, "requeue", [str(s) for s in operations.REQUEUE_FROM])

        cancel = add(
            "cancel",
            "Cancel pending and waiting jobs (and the waiting jobs that depend on them); ask "
            "running ones to stop (they end cancelled when their handler stops).",
        )
        cancel.add_argument("ids", nargs="*", metavar="ID", help="Ids of the jobs to cancel.")
        _add_bulk_options(cancel, "cancel", [str(s) for s in operations.CANCEL_AT_ONCE])

        prune = add("prune", "Delete finished jobs older than a duration, in batches.")
        prune.add_argument(
            "--older-than",
            required=True,
            metavar="DURATION",
            help="Age of completed_at, e.g. 45s, 15m, 12h or 7d.",
        )
        prune.add_argument(
            "--include-dead",
            action="store_true",
            help="Delete dead jobs too (default: completed and cancelled only).",
        )
        prune.add_argument(
            "--batch-size",
            default=pruning.DEFAULT_BATCH_SIZE,
            help="Rows deleted per transaction, at most "
            f"{pruning.MAX_BATCH_SIZE} (default: %(default)s).",
        )

        add("schedules", "List the periodic jobs' schedules with their last and next tick.")

        pause = add(
            "pause",
            "Stop workers claiming a queue's jobs (new jobs are still accepted), until "
            "resumed or for a while.",
        )
        pause.add_argument("queue", metavar="QUEUE", help="The queue to pause.")
        pause.add_argument(
            "--until",
            metavar="TIME",
            help="Lift the pause at this ISO 8601 time with a UTC offset, e.g. 2026-12-01T12:00Z.",
        )
        pause.add_argument(
            "--for",
            dest="for_",
            metavar="DURATION",
            help="Lift the pause after this long, e.g. 45s, 15m, 12h or 7d.",
        )

        resume = add("resume", "Let workers claim a paused queue's jobs again, at once.")
        resume.add_argument("queue", metavar="QUEUE", help="The queue to resume.")

        emit = add(
            "emit",
            "Emit an event: wake the jobs waiting for its key. The first emit wins: the same "
            "payload again changes nothing, another one is an error.",
        )
        emit.add_argument("key", metavar="KEY", help="The event's key (letters, digits, _ - . :).")
        emit.add_argument(
            "--payload",
            metavar="JSON",
            help="The event's payload, any JSON value (default: null).",
        )

        trail = add(
            "audit",
            "The audit trail: who requeued, cancelled, ran now, paused, resumed or started a "
            "bulk run, when, from which door (admin, rest, cli), newest first.",
        )
        trail.add_argument("--job", metavar="ID", help="Only the entries of this job.")
        trail.add_argument("--queue", help="Only the entries of this queue.")
        trail.add_argument("--action", help=f"Only this action ({', '.join(AuditAction.values)}).")
        trail.add_argument("--actor", help="Only this actor, exactly (e.g. alice, os:deploy).")
        trail.add_argument(
            "--limit",
            default=DEFAULT_LIMIT,
            help=f"How many entries to show, at most {MAX_LIMIT} (default: %(default)s).",
        )

        add(
            "doctor",
            "The queue's database health in words, with what to do: what holds back the "
            "vacuum horizon (sessions, replication slots, prepared transactions), dead tuples "
            "and the last vacuum of the job tables, the oldest pending job. Exit status 1 "
            "when something needs an operator.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        self.actor = self._actor(options)
        handler = getattr(self, "handle_" + options["subcommand"])
        data, text = handler(options)
        if options["json"]:
            self.stdout.write(json.dumps(data, indent=2, default=str))
        else:
            # Each handler escapes the job data it shows; this is the net
            # under them (anything missed keeps its line breaks only).
            self.stdout.write(printable(text, lines=True))
        failure = data.get("error") if isinstance(data, dict) else None
        if failure:
            raise CommandError(failure, returncode=1)
        if options["subcommand"] == "doctor" and data["needs_operator"]:
            count = sum(1 for f in data["findings"] if f["severity"] == doctor.OPERATOR)
            raise CommandError(f"{count} finding(s) need an operator", returncode=1)

    def _actor(self, options: dict[str, Any]) -> Actor:
        """Who acts: ``--user`` (or ``$DURABLE_JOBS_USER``), checked; else the OS login.

        Whoever runs ``manage.py`` can read the project's settings, and so
        the database's password: the CLI cannot refuse them anything they
        could not do with ``psql``. Naming a user makes the CLI check that
        user's permissions exactly as the admin and the REST API do, and
        ``CLI_REQUIRE_USER`` makes naming one mandatory (for shared shells
        where the trail must name a person). Either way, the OS login is
        recorded.
        """
        username = options.get("user") or os.environ.get(USER_ENV) or None
        subcommand = options["subcommand"]
        if username is None:
            if jobs_settings.CLI_REQUIRE_USER:
                raise CommandError(
                    f"Name the Django user you act as: --user USERNAME or ${USER_ENV} "
                    "(DURABLE_JOBS['CLI_REQUIRE_USER'] is True)",
                    returncode=1,
                )
            return Actor.for_os_user("cli")
        from django.contrib.auth import get_user_model

        model = get_user_model()
        try:
            user = model._default_manager.get_by_natural_key(username)
        except model.DoesNotExist:
            raise CommandError(f"--user: no user {username!r}", returncode=1) from None
        if not is_active_user(user):
            raise CommandError(f"--user: {username!r} is not an active user", returncode=1)
        actor = Actor.for_os_user("cli", user)
        if subcommand == "audit":
            needed: tuple[str, ...] = (AUDIT_READ_PERMISSION,)
        elif subcommand in OPERATOR_SUBCOMMANDS:
            # Checked before any input is read; the operation checks again (operations,
            # bulk, pausing), as for the admin and the API.
            needed = ()
            actor.require(OPERATOR_SUBCOMMANDS[subcommand])
        elif subcommand == "prune":
            needed = ("durable_jobs.delete_job",)
        else:
            needed = READ_PERMISSIONS
        if needed and not any(user.has_perm(perm) for perm in needed):
            raise CommandError(
                f"--user: {username!r} lacks the permission {' or '.join(needed)} needed for "
                f"`jobs {subcommand}`",
                returncode=1,
            )
        return actor

    def execute(self, *args: Any, **options: Any) -> Any:
        try:
            return super().execute(*args, **options)
        except PermissionDenied as exc:
            raise CommandError(f"--user: {exc}", returncode=1) from None

    # Subcommands: each returns (JSON data, readable text).

    def handle_stats(self, options: dict[str, Any]) -> tuple[Any, str]:
        stats = job_stats()
        statuses = table(stats["statuses"].items(), ("status", "jobs"))
        queues = table(
            (
                [
                    queue,
                    *(entry[s] for s in JobStatus.values),
                    entry["total"],
                    describe_limits(entry["limits"]),
                    _paused_text(entry),
                    describe_held_back(entry["held_back"]),
                ]
                for queue, entry in stats["queues"].items()
            ),
            ("queue", *JobStatus.values, "total", "limits", "paused", "held back"),
        )
        oldest = stats["oldest_pending_age_seconds"]
        text = (
            f"{statuses}\n\nTotal: {stats['total']}\n"
            f"Oldest runnable pending job waiting: "
            f"{'-' if oldest is None else f'{oldest:.1f}s'}\n\n{queues}"
        )
        return stats, text

    def handle_list(self, options: dict[str, Any]) -> tuple[Any, str]:
        limit = parse_int(options["limit"], "--limit", low=1, high=MAX_LIMIT)
        jobs = Job.objects.all()
        if options["status"] is not None:
            if options["status"] not in JobStatus.values:
                raise CommandError(
                    f"--status: unknown status {options['status']!r}; "
                    f"choose from {', '.join(JobStatus.values)}",
                    returncode=1,
                )
            jobs = jobs.filter(status=options["status"])
        if options["type"] is not None:
            jobs = jobs.filter(type=options["type"])
        if options["queue"] is not None:
            jobs = jobs.filter(queue=options["queue"])
        # Newest first, as the status/type/queue/created indexes are ordered.
        rows = [job_summary(job) for job in jobs.order_by("-created_at")[:limit]]
        text = table(([row[c] for c in LIST_COLUMNS] for row in rows), LIST_COLUMNS)
        return rows, f"{text}\n({len(rows)} job{'s' if len(rows) != 1 else ''})"

    def handle_show(self, options: dict[str, Any]) -> tuple[Any, str]:
        (job_id,) = parse_ids([options["id"]])
        try:
            job = Job.objects.get(pk=job_id)
        except Job.DoesNotExist:
            raise CommandError(f"No job with id {job_id}", returncode=1) from None
        detail = job_detail(job)
        lines = []
        for key, value in detail.items():
            if key == "steps_truncated":
                continue
            if key == "steps":
                if not value:
                    lines.append("steps: -")
                    continue
                more = " (the first ones; more exist)" if detail["steps_truncated"] else ""
                lines.append(f"steps: {len(value)}{more}")
                lines.append(table((_step_row(step) for step in value), STEP_COLUMNS))
                continue
            if key == "waiting_for":
                shown = printable(step_records.describe_waiting_for(value) or "-")
            elif key in ("payload", "result", "errors"):
                # JSON escapes control characters in its strings already.
                shown = printable(json.dumps(value, indent=2, default=str), lines=True)
            elif key in ("depends_on", "dependents"):
                shown = ", ".join(value)
            else:
                # A traceback keeps its lines; any other field stays on its own.
                shown = printable(value, lines=key == "last_error")
            lines.append(f"{key}: {shown}")
        return detail, "\n".join(lines)

    def _existing(self, ids: list[uuid.UUID]) -> None:
        found = set(Job.objects.filter(pk__in=ids).values_list("pk", flat=True))
        unknown = [str(job_id) for job_id in ids if job_id not in found]
        if unknown:
            raise CommandError(f"No job with id {', '.join(unknown)}", returncode=1)

    def _bulk_report(
        self, verb: str, result: operations.BulkResult, allowed: str
    ) -> tuple[Any, str]:
        data: dict[str, Any] = {
            verb: len(result.changed),
            "ids": [str(i) for i in result.changed],
            "skipped": result.skipped,
        }
        text = f"{len(result.changed)} job(s) {verb}."
        if result.skipped:
            data["error"] = (
                f"{result.skipped} job(s) not {verb}: only {allowed} jobs can be {verb}."
            )
            text += f" {result.skipped} skipped (not {allowed})."
        return data, text

    def handle_requeue(self, options: dict[str, Any]) -> tuple[Any, str]:
        if options["from_step"] is not None:
            return self._retry_from_step(options)
        if options["all"] or options["all_dead"]:
            return self._bulk("requeue", options)
        ids = self._ids(options, "requeue")
        result = operations.requeue_many(ids, actor=self.actor)
        return self._bulk_report("requeued", result, "dead or cancelled")

    def _retry_from_step(self, options: dict[str, Any]) -> tuple[Any, str]:
        if options["all"] or options["all_dead"]:
            raise CommandError("--from-step retries one job: give its id, not --all", returncode=1)
        ids = self._ids(options, "requeue")
        if len(ids) != 1:
            raise CommandError("--from-step retries one job: give one id", returncode=1)
        (job_id,) = ids
        step = options["from_step"]
        try:
            job = operations.requeue(job_id, from_step=step, actor=self.actor)
        except operations.UnknownStep as exc:
            raise CommandError(f"--from-step: {printable(exc)}", returncode=1) from None
        except operations.JobStateError as exc:
            raise CommandError(str(exc), returncode=1) from None
        data = {"requeued": 1, "ids": [str(job.pk)], "from_step": step}
        return data, f"Job {job.pk} requeued, from step {printable(step)}."

    def _ids(self, options: dict[str, Any], operation: str) -> list[uuid.UUID]:
        """The ids given, with no bulk option beside them; each must exist."""
        given = [option for name, option in BULK_OPTIONS.items() if options[name] is not None]
        if given:
            raise CommandError(f"{', '.join(given)} only apply with --all", returncode=1)
        if not options["ids"]:
            extra = ", --all or --all-dead" if operation == "requeue" else " or --all"
            raise CommandError(f"Give job ids to {operation}{extra}", returncode=1)
        ids = parse_ids(options["ids"])
        self._existing(ids)
        return ids

    def _bulk(self, operation: str, options: dict[str, Any]) -> tuple[Any, str]:
        """``--all`` (and ``--all-dead``): ``bulk.run`` over the filter, printing progress."""
        if options["ids"]:
            raise CommandError("Give job ids or --all, not both", returncode=1)
        status = options["status"]
        if options.get("all_dead"):
            if options["all"]:
                raise CommandError("Give --all or --all-dead, not both", returncode=1)
            if status not in (None, JobStatus.DEAD):
                raise CommandError(
                    f"--all-dead requeues dead jobs; for {status} ones use --all --status {status}",
                    returncode=1,
                )
        statuses = operations.REQUEUE_FROM if operation == "requeue" else operations.CANCEL_AT_ONCE
        if status is not None and status not in statuses:
            raise CommandError(
                f"--status: {operation} --all applies to {' or '.join(statuses)} jobs, "
                f"not {status!r}",
                returncode=1,
            )
        after, before = (
            None if options[name] is None else _parse_moment(options[name], BULK_OPTIONS[name])
            for name in ("created_after", "created_before")
        )
        batch_size = bulk.DEFAULT_BATCH_SIZE
        if options["batch_size"] is not None:
            batch_size = parse_int(
                options["batch_size"], "--batch-size", low=1, high=bulk.MAX_BATCH_SIZE
            )
        try:
            job_filter = bulk.JobFilter(
                status=status or statuses[0],
                queue=options["queue"],
                type=options["type"],
                created_after=after,
                created_before=before,
                error_contains=options["error_contains"],
            )
        except bulk.InvalidFilter as exc:
            raise CommandError(f"{BULK_OPTIONS[exc.field]}: {exc.message}", returncode=1) from None
        progress = bulk.run(
            operation,
            job_filter,
            batch_size=batch_size,
            on_batch=lambda progress: self._progress(progress.describe()),
            actor=self.actor,
        )
        self._progress_done()
        data = {
            progress.verb: progress.changed,
            "batches": progress.batches,
            "matched": progress.matched,
            "matched_is_estimate": progress.matched_is_estimate,
            "filter": job_filter.as_dict(),
        }
        return data, f"{progress.changed} {job_filter.status} job(s) {progress.verb}."

    def handle_cancel(self, options: dict[str, Any]) -> tuple[Any, str]:
        if options["all"]:
            return self._bulk("cancel", options)
        ids = self._ids(options, "cancel")
        result = operations.cancel_many(ids, actor=self.actor)
        data, text = self._bulk_report("cancelled", result, "pending, waiting or running")
        # Running jobs: asked to stop; they end cancelled when their handler does.
        data["cancel_requested"] = len(result.requested)
        data["cancel_requested_ids"] = [str(i) for i in result.requested]
        if result.requested:
            text += (
                f"\n{len(result.requested)} running job(s): cancel requested; each ends "
                "cancelled when its handler stops (it sees ctx.cancelled within about a second)."
            )
        return data, text

    def handle_prune(self, options: dict[str, Any]) -> tuple[Any, str]:
        try:
            older_than: timedelta = parse_duration(options["older_than"])
        except ValueError as exc:
            raise CommandError(f"--older-than: {exc}", returncode=1) from None
        batch_size = parse_int(
            options["batch_size"], "--batch-size", low=1, high=pruning.MAX_BATCH_SIZE
        )
        statuses = [JobStatus.COMPLETED, JobStatus.CANCELLED]
        if options["include_dead"]:
            statuses.append(JobStatus.DEAD)
        deleted, batches = pruning.prune(
            statuses,
            older_than,
            batch_size=batch_size,
            on_batch=lambda n, total: self._progress(f"deleted {total} job(s) in {n} batch(es)"),
        )
        self._progress_done()
        status_names = [str(s) for s in statuses]
        data = {
            "deleted": deleted,
            "batches": batches,
            "statuses": status_names,
            "older_than": format_duration(older_than),
        }
        text = (
            f"{deleted} job(s) deleted ({', '.join(status_names)}; finished more than "
            f"{data['older_than']} ago) in {batches} batch(es)."
        )
        return data, text

    def handle_schedules(self, options: dict[str, Any]) -> tuple[Any, str]:
        rows = schedule_overview()
        if not rows:
            return rows, "No schedules declared."

        def when(value: Any) -> str:
            return "-" if value is None else value.strftime("%Y-%m-%d %H:%M:%S UTC")

        def last_job(row: dict[str, Any]) -> str:
            if row["last_job_id"] is None:
                return "-"
            return f"{row['last_job_id']} ({row['last_job_status']})"

        text = table(
            (
                [
                    row["name"] + ("" if row["enabled"] else " (disabled)"),
                    row["type"] + ("" if row["handler_registered"] else " (no handler!)"),
                    row["timing"],
                    row["timezone"],
                    row["queue"],
                    row["missed"],
                    when(row["last_tick"]),
                    last_job(row),
                    when(row["next_tick"]),
                ]
                for row in rows
            ),
            ("name", "type", "timing", "timezone", "queue", "missed", "last tick", "last job",
             "next tick"),
        )  # fmt: skip
        data = [
            {**row, **{k: _iso(row[k]) for k in ("first_seen", "last_tick", "next_tick")}}
            for row in rows
        ]
        for row in data:
            if row["last_job_id"] is not None:
                row["last_job_id"] = str(row["last_job_id"])
        return data, f"{text}\n({len(rows)} schedule{'s' if len(rows) != 1 else ''})"

    def handle_pause(self, options: dict[str, Any]) -> tuple[Any, str]:
        until_text, for_text = options["until"], options["for_"]
        if until_text is not None and for_text is not None:
            raise CommandError("Give --until or --for, not both", returncode=1)
        until: datetime | timedelta | None = None
        if until_text is not None:
            until = _parse_time(until_text)
        elif for_text is not None:
            try:
                until = parse_duration(for_text)
            except ValueError as exc:
                raise CommandError(f"--for: {exc}", returncode=1) from None
        option = "--until" if until_text is not None else "--for"
        state = self._queue_state(
            lambda: pausing.pause_queue(options["queue"], until, actor=self.actor), option
        )
        data = _queue_data(state.name)
        end = data["paused_until"]
        text = f"Queue {state.name} paused {'until resumed' if end is None else f'until {end}'}."
        return data, text

    def handle_resume(self, options: dict[str, Any]) -> tuple[Any, str]:
        state = self._queue_state(
            lambda: pausing.resume_queue(options["queue"], actor=self.actor), ""
        )
        return _queue_data(state.name), f"Queue {state.name} resumed."

    def handle_audit(self, options: dict[str, Any]) -> tuple[Any, str]:
        limit = parse_int(options["limit"], "--limit", low=1, high=MAX_LIMIT)
        job = None if options["job"] is None else parse_ids([options["job"]])[0]
        action = options["action"]
        if action is not None and action not in AuditAction.values:
            raise CommandError(
                f"--action: unknown action {action!r}; choose from {', '.join(AuditAction.values)}",
                returncode=1,
            )
        entries = audit.entries(
            using=db.database_alias(),
            job=job,
            queue=options["queue"],
            action=action,
            actor=options["actor"],
        )
        rows = [audit.as_dict(entry) for entry in entries[:limit]]
        text = table(
            (
                [
                    row["at"],
                    row["actor"],
                    row["door"],
                    row["action"],
                    row["job_id"] or "-",
                    row["queue"] or "-",
                    json.dumps(row["details"], sort_keys=True) if row["details"] else "",
                ]
                for row in rows
            ),
            AUDIT_COLUMNS,
        )
        return rows, f"{text}\n({len(rows)} entr{'ies' if len(rows) != 1 else 'y'})"

    def handle_emit(self, options: dict[str, Any]) -> tuple[Any, str]:
        payload: Any = None
        if options["payload"] is not None:
            try:
                payload = json.loads(options["payload"])
            except ValueError as exc:
                raise CommandError(f"--payload: not JSON: {exc}", returncode=1) from None
        try:
            result = events.emit_event(options["key"], payload, actor=self.actor)
        except InvalidEvent as exc:
            where = "KEY" if exc.field == "key" else "--payload"
            raise CommandError(f"{where}: {printable(exc.message)}", returncode=1) from None
        except EventConflict as exc:
            raise CommandError(printable(exc), returncode=1) from None
        event = result.event
        data = {
            "key": event.key,
            "payload": event.payload,
            "created_at": _iso(event.created_at),
            "created": result.created,
        }
        if result.created:
            text = f"Event {printable(event.key)} emitted."
        else:
            text = f"Event {printable(event.key)} was emitted before with this payload: unchanged."
        return data, text

    def handle_doctor(self, options: dict[str, Any]) -> tuple[Any, str]:
        reading = doctor.read()
        findings = doctor.diagnose(reading)
        data = doctor.as_dict(reading, findings)
        return data, doctor_text(reading, findings)

    @staticmethod
    def _queue_state(change: Callable[[], QueueState], option: str) -> QueueState:
        try:
            return change()
        except InvalidPause as exc:
            where = "QUEUE" if exc.field == "queue" else option
            raise CommandError(f"{where}: {exc.message}", returncode=1) from None

    # Progress: on stderr, and only on a terminal, so pipes and JSON stay clean.

    def _progress(self, message: str) -> None:
        if self.stderr.isatty():
            self.stderr.write(f"\r{message}", ending="")
            self.stderr.flush()
            self._progress_shown = True

    def _progress_done(self) -> None:
        if getattr(self, "_progress_shown", False):
            self.stderr.write("")
            self._progress_shown = False
