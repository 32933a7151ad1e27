"""Throttles of the REST API: failed authentications (on by default), and DRF's (opt-in).

**Failed authentications.** Checking an HTTP Basic password costs about half a
second of CPU with Django's production hashers, and ``ModelBackend`` spends it
for unknown users too (so that timing tells nobody which users exist): a
client guessing passwords, or one stuck retrying a wrong one, would burn the
web server's CPU. So the API counts the authentications that fail
(``AuthenticationFailed``: a wrong password or token, a malformed header, an
inactive user) per client address, and once ``API_FAILED_AUTH_RATE`` is
reached it answers that address 429 with ``Retry-After``, before any
authentication class runs, until the window ends. The address is DRF's
(``BaseThrottle.get_ident``: ``REMOTE_ADDR``, or the ``X-Forwarded-For`` entry
that ``REST_FRAMEWORK["NUM_PROXIES"]`` designates). The counts live in Django's
default cache: per process with the default ``LocMemCache``, cluster-wide with
a shared one (Redis, Memcached, the database cache).

**DRF's throttles.** ``API_THROTTLE_CLASSES`` (default: the project's
``DEFAULT_THROTTLE_CLASSES``, none unless it sets some) with a scope per kind
of call (``throttle_scope``), for ``ScopedRateThrottle``: ``durable_jobs`` for
reads, ``durable_jobs_enqueue`` for ``POST /api/jobs``, ``durable_jobs_operate``
for the operator's calls (requeue, cancel, pause, resume). A scope without a
rate in ``REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]`` is not throttled.
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import cast

from django.core.cache import cache
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string
from rest_framework.exceptions import Throttled
from rest_framework.permissions import SAFE_METHODS
from rest_framework.request import Request
from rest_framework.settings import api_settings
from rest_framework.throttling import BaseThrottle

from ..conf import jobs_settings
from ..rates import RateLimit, parse_rate_limit

logger = logging.getLogger("django_durable_jobs.api")

#: ``throttle_scope`` of each kind of call (``ScopedRateThrottle`` reads it).
READ_SCOPE = "durable_jobs"
ENQUEUE_SCOPE = "durable_jobs_enqueue"
OPERATE_SCOPE = "durable_jobs_operate"
#: The cache key of one address's failures in one window: the address is
#: hashed, as X-Forwarded-For is the client's text and cache keys have rules
#: (Memcached: 250 characters, no spaces or control characters).
FAILED_AUTH_KEY = "durable_jobs:failed_auth:{address}:{window}"


def clock() -> float:
    """Now, in seconds since the epoch (tests move it to the next window)."""
    return time.time()


class TooManyFailedAuthentications(Throttled):
    """429: this address failed to authenticate ``API_FAILED_AUTH_RATE`` times in the window.

    ``wait`` makes DRF's handler send ``Retry-After``.
    """

    default_code = "too_many_failed_authentications"
    default_detail = (
        "Too many failed authentications from this address "
        "(DURABLE_JOBS['API_FAILED_AUTH_RATE']); credentials are not checked until the "
        "window ends."
    )


def client_address(request: Request) -> str:
    """The address DRF's throttles count by: ``REMOTE_ADDR``, or ``X-Forwarded-For``'s
    entry that ``NUM_PROXIES`` designates (the whole header when it is unset)."""
    return BaseThrottle().get_ident(request)


@dataclass(frozen=True)
class FailedAuthentications:
    """The failed authentications of one address in the current fixed window.

    Fixed windows aligned on the clock (one counter, one atomic ``incr``), so
    that concurrent failures are all counted: a read-modify-write list would
    lose those that race, and a parallel guesser would slip through.
    """

    address: str
    rate: RateLimit
    now: float

    @property
    def window(self) -> int:
        return int(self.now // self.rate.seconds)

    @property
    def key(self) -> str:
        digest = hashlib.sha256(self.address.encode("utf-8", "surrogatepass")).hexdigest()[:32]
        return FAILED_AUTH_KEY.format(address=digest, window=self.window)

    @property
    def seconds_left(self) -> int:
        """Until the window ends, at least 1 (``Retry-After``)."""
        return max(1, math.ceil((self.window + 1) * self.rate.seconds - self.now))

    def refuse_if_exhausted(self) -> None:
        count = cache.get(self.key, 0)
        if isinstance(count, int) and count >= self.rate.count:
            raise TooManyFailedAuthentications(wait=self.seconds_left)

    def record(self) -> None:
        timeout = self.seconds_left + 1
        cache.add(self.key, 0, timeout)
        try:
            count = cache.incr(self.key)
        except ValueError:  # expired between add() and incr()
            cache.set(self.key, 1, timeout)
            count = 1
        if count == self.rate.count:
            logger.warning(
                "REST API: %s failed authentications from address=%r in %g s; its requests "
                "are refused (429) for %s s",
                count,
                self.address,
                self.rate.seconds,
                self.seconds_left,
                extra={"client_address": self.address, "failed_authentications": count},
            )


def failed_authentications(request: Request) -> FailedAuthentications | None:
    """The request's address's count, or ``None`` when ``API_FAILED_AUTH_RATE`` is ``None``."""
    rate = jobs_settings.API_FAILED_AUTH_RATE
    if rate is None:
        return None
    return FailedAuthentications(client_address(request), parse_rate_limit(rate), clock())


def throttle_scope(method: str, action: str | None) -> str | None:
    """The scope of a call, or ``None`` when the project gave that scope no rate.

    Without a rate, DRF's ``ScopedRateThrottle`` would raise ImproperlyConfigured
    (a 500) on every call; unrated, the call is simply not throttled.
    """
    if method in SAFE_METHODS:
        scope = READ_SCOPE
    elif action == "create":
        scope = ENQUEUE_SCOPE
    else:
        scope = OPERATE_SCOPE
    return scope if scope in (api_settings.DEFAULT_THROTTLE_RATES or {}) else None


@lru_cache(maxsize=8)
def _load(paths: tuple[str, ...]) -> tuple[type[BaseThrottle], ...]:
    classes = []
    for path in paths:
        try:
            classes.append(import_string(path))
        except ImportError as exc:
            raise ImproperlyConfigured(
                f"DURABLE_JOBS['API_THROTTLE_CLASSES']: cannot import {path!r}: {exc}"
            ) from exc
    return tuple(classes)


def throttle_classes() -> Sequence[type[BaseThrottle]]:
    """``API_THROTTLE_CLASSES``, or DRF's default; read on each request (``override_settings``)."""
    paths = jobs_settings.API_THROTTLE_CLASSES
    if paths is None:
        # Imported by DRF's settings (an IMPORT_STRINGS key), though typed as strings.
        return tuple(cast("Sequence[type[BaseThrottle]]", api_settings.DEFAULT_THROTTLE_CLASSES))
    return _load(tuple(paths))
