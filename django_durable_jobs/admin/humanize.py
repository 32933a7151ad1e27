"""Durations for people, as the admin's pages show them."""

from __future__ import annotations

import datetime

from django.utils.translation import gettext


def describe_age(age: datetime.timedelta | None) -> str:
    """``45 s``, ``12 min``, ``3 h 20 min``, ``2 d 4 h``; ``-`` for None."""
    if age is None:
        return "-"
    seconds = max(0, int(age.total_seconds()))
    if seconds < 60:
        return gettext("%(n)d s") % {"n": seconds}
    minutes = seconds // 60
    if minutes < 60:
        return gettext("%(n)d min") % {"n": minutes}
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return gettext("%(h)d h %(m)d min") % {"h": hours, "m": minutes}
    days, hours = divmod(hours, 24)
    return gettext("%(d)d d %(h)d h") % {"d": days, "h": hours}
