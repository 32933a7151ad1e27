"""A cheaper reset between transactional tests: DELETE, not TRUNCATE, and static rows kept.

After each ``transaction=True`` test (and ``live_server``'s), pytest-django
flushes the database as Django's ``TransactionTestCase`` does: one
``TRUNCATE`` of every table, then ``post_migrate``, which recreates every
content type and permission. On PostgreSQL a ``TRUNCATE`` makes a new file
for each table, index and TOAST table, and fsyncs them at commit: measured
on the two-core CI machine, 0.25-0.6 s for the 19 tables, plus 0.2-0.3 s
to recreate the content types and permissions, per test, for about 700
tests. ``DELETE FROM`` each table of the few rows a test leaves takes a few
milliseconds. ``django_content_type`` and ``auth_permission`` are kept,
and ``post_migrate`` is then not sent: its receivers
(``create_contenttypes``, ``create_permissions``, and on Django 6.1
``rename_permissions_after_model_rename``) write only those tables,
and would find every row still there, in about 40 SELECTs (25 ms of the
test process's CPU a test, the largest cost left of a transactional test;
``tests/integration/test_reset.py`` checks both). A flush that fell back to
Django's own TRUNCATE sends it as before.

What stays the same: every table a test can write is emptied in one
transaction (Django's foreign keys are ``DEFERRABLE INITIALLY DEFERRED``,
so the order of the DELETEs does not matter; the package has no trigger
that a DELETE would fire and a TRUNCATE would not); sequences are not
reset, as ``TransactionTestCase`` does not reset them unless asked
(``reset_sequences``, which falls back to Django's own flush, as does
``allow_cascade``). A test that adds a content type or a permission keeps
it for the tests after it; none does (the permissions come from the
models' Meta).

What would differ, and is bounded: a DELETE leaves dead rows behind, and a
table that grows from test to test reads and plans differently from the
empty file a TRUNCATE leaves (a lock-order test deadlocked on a job table
of 3,000 pages of dead rows). A table over ``TRUNCATE_ABOVE_BYTES`` is
therefore truncated as before, first (a TRUNCATE must come before the
DELETEs whose deferred foreign-key checks are still pending).
"""

from __future__ import annotations

import weakref
from typing import Any

#: Rows that only ``post_migrate`` writes, the same after every flush.
KEPT = frozenset({"django_content_type", "auth_permission"})
#: A table whose file grew past this (live and dead rows) is truncated instead.
TRUNCATE_ABOVE_BYTES = 256 * 1024

#: Truncate the large tables, then delete from the others, in one statement.
RESET = """
DO $reset$
DECLARE
    name text;
    large text[] := '{}';
BEGIN
    FOREACH name IN ARRAY %(tables)s LOOP
        IF pg_relation_size(quote_ident(name)) > %(limit)d THEN
            large := large || name;
        END IF;
    END LOOP;
    IF cardinality(large) > 0 THEN
        EXECUTE 'TRUNCATE ' || (SELECT string_agg(quote_ident(t), ', ') FROM unnest(large) t)
            || ' CASCADE';
    END IF;
    FOREACH name IN ARRAY %(tables)s LOOP
        IF NOT name = ANY(large) THEN
            EXECUTE 'DELETE FROM ' || quote_ident(name);
        END IF;
    END LOOP;
END
$reset$;
"""


#: Whether the last flush kept the static rows (then its ``post_migrate`` has nothing to do).
_kept_static_rows = False


def install() -> None:
    from django.core.management.commands import flush
    from django.db.backends.postgresql.operations import DatabaseOperations

    truncate = DatabaseOperations.sql_flush
    if getattr(truncate, "deletes", False):
        return

    def sql_flush(
        self: DatabaseOperations,
        style: Any,
        tables: list[str],
        *,
        reset_sequences: bool = False,
        allow_cascade: bool = False,
    ) -> list[str]:
        global _kept_static_rows
        _kept_static_rows = not (reset_sequences or allow_cascade or not tables)
        if not _kept_static_rows:
            return truncate(
                self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade
            )
        emptied = [table for table in tables if table not in KEPT]
        # Table names are Django's (identifiers of our models), quoted again in the SQL.
        array = "ARRAY[" + ", ".join(f"'{table}'" for table in emptied) + "]::text[]"
        return [
            "SET CONSTRAINTS ALL DEFERRED;",
            RESET % {"tables": array, "limit": TRUNCATE_ABOVE_BYTES},
        ]

    sql_flush.deletes = True  # type: ignore[attr-defined]
    DatabaseOperations.sql_flush = sql_flush  # type: ignore[method-assign]

    emit = flush.emit_post_migrate_signal

    def emit_post_migrate_signal(*args: Any, **kwargs: Any) -> None:
        if _kept_static_rows and set(_receivers()) <= POST_MIGRATE_WRITES_ONLY_KEPT:
            return
        emit(*args, **kwargs)

    flush.emit_post_migrate_signal = emit_post_migrate_signal


#: ``post_migrate``'s receivers that write only the tables in ``KEPT``.
POST_MIGRATE_WRITES_ONLY_KEPT = frozenset(
    {
        "django.contrib.contenttypes.management.create_contenttypes",
        "django.contrib.auth.management.create_permissions",
        # Django 6.1: renames permissions after a RenameModel in the migration plan;
        # a flush sends no plan.
        "django.contrib.auth.management.rename_permissions_after_model_rename",
    }
)


def _receivers() -> list[str]:
    """The dotted names of ``post_migrate``'s receivers: another app's would still be sent."""
    from django.db.models.signals import post_migrate

    names = []
    for entry in post_migrate.receivers:
        ref = entry[1]
        receiver = ref() if isinstance(ref, weakref.ReferenceType) else ref
        if receiver is not None:
            names.append(f"{receiver.__module__}.{receiver.__qualname__}")
    return names
