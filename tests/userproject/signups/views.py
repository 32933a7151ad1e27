from __future__ import annotations

from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_POST

from django_durable_jobs import enqueue

from .models import Signup


@require_POST
def signup(request: HttpRequest) -> JsonResponse:
    """Store the signup and enqueue its welcome email, in one transaction: both or neither."""
    email = request.POST["email"]
    with transaction.atomic():
        row = Signup.objects.create(email=email)
        enqueue("emails.welcome", {"to": email, "signup": row.pk})
    return JsonResponse({"id": row.pk}, status=201)
