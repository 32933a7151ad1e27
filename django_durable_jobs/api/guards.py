"""What every authenticated API view checks before its action runs.

In order, each cheaper than the next and none reading more than it must:

1. the body's announced size (413, or 411 for a chunked POST), unread;
2. a state-changing request's ``Content-Type``: ``application/json`` or 415,
   so that no cross-site HTML form can make one (``parsers.check_json_content_type``);
3. the client address's failed authentications: 429 without running any
   authentication class once ``API_FAILED_AUTH_RATE`` is reached
   (``throttling``); a failure counts;
4. DRF's authentication, permissions and throttles (``API_THROTTLE_CLASSES``,
   scoped by ``throttle_scope``);
5. for the actions that take no options (``empty_body_actions``), the body:
   a JSON object without keys, ``{}`` (an empty body counts as ``{}``).

The health view has none of this: it authenticates nobody and changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rest_framework import serializers
from rest_framework.exceptions import AuthenticationFailed, ValidationError
from rest_framework.request import Request
from rest_framework.throttling import BaseThrottle

from .parsers import BoundedJSONParser, check_body_size, check_json_content_type
from .throttling import failed_authentications, throttle_classes, throttle_scope


class EmptyBodySerializer(serializers.Serializer[None]):
    """The body of a call that takes no options: ``{}``.

    Its schema (``schema.EmptyBodyExtension``) says ``additionalProperties:
    false``. A key is refused rather than ignored, so that a client asking
    for an option this server does not know (a later version's) learns it
    instead of getting the plain action.
    """


def check_empty_body(data: Any) -> None:
    """400 unless ``data`` is a JSON object without keys."""
    if not isinstance(data, Mapping):
        raise ValidationError({"body": ["must be a JSON object: {} when there is nothing to say."]})
    if data:
        raise ValidationError(
            {str(name): ["is not an option of this call; send {}."] for name in sorted(data)}
        )


class RequestGuardsMixin:
    """For the viewsets: the checks above, around DRF's ``initial``."""

    parser_classes: Sequence[Any] = (BoundedJSONParser,)
    #: Actions whose body must be ``{}`` (check_empty_body).
    empty_body_actions: frozenset[str] = frozenset()

    @property
    def throttle_scope(self) -> str | None:
        """``ScopedRateThrottle``'s scope: reads, enqueue, or the operator's calls."""
        request: Request = getattr(self, "request")  # noqa: B009 (set by APIView.dispatch)
        return throttle_scope(request.method or "GET", getattr(self, "action", None))

    def get_throttles(self) -> list[BaseThrottle]:
        return [cls() for cls in throttle_classes()]

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        # Before authentication: nothing is read, nothing is hashed, no query.
        check_body_size(request)
        action = getattr(self, "action", None)  # ViewSetMixin's: None for an unrouted method
        if action is not None:
            # A method the route does not take is a 405 (DRF's, in dispatch), not a 415.
            check_json_content_type(request)
        super().initial(request, *args, **kwargs)  # type: ignore[misc]
        if action in self.empty_body_actions:
            check_empty_body(request.data)

    def perform_authentication(self, request: Request) -> None:
        failures = failed_authentications(request)
        if failures is not None:
            failures.refuse_if_exhausted()
        try:
            super().perform_authentication(request)  # type: ignore[misc]
        except AuthenticationFailed:
            if failures is not None:
                failures.record()
            raise
