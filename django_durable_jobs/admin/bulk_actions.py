"""What the job list offers in bulk: the filters a bulk run reproduces, its operations.

Shared by the list (``jobs.py``) and its "select all" (``select_all.py``).
"""

from __future__ import annotations

from collections.abc import Iterable

from django.utils.functional import Promise
from django.utils.translation import gettext_lazy as _

from .. import operations

#: The changelist parameters a bulk operation can reproduce as a ``bulk.JobFilter``;
#: with any other, the list is not offered in bulk (what is changed must be what is listed).
BULK_PARAMETERS = frozenset(
    {
        "status__exact",
        "type",
        "queue",
        "created_at__year",
        "created_at__month",
        "created_at__day",
        "q",
        "o",
        "p",
        "all",
        "_facets",
    }
)
#: Operation -> the statuses whose list offers it, and its button's verb.
BULK_ACTIONS: dict[str, tuple[tuple[str, ...], Promise]] = {
    "requeue": (tuple(operations.REQUEUE_FROM), _("Requeue")),
    "cancel": (tuple(operations.CANCEL_AT_ONCE), _("Cancel")),
}


def _either(states: Iterable[str]) -> str:
    """``"pending, waiting or running"``."""
    names = [str(state) for state in states]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
