"""The job list's bounds: its declared filters only, no sorting, no "select all" in one request.

Django's changelist takes any field lookup typed into its address
(``?last_error__iregex=...``, ``?payload__contains=...``: a scan of the
whole table per page view, and a way to probe fields the list does not
show) and sorts by ``?o=`` even with ``sortable_by = ()``. And its "Select
all N" runs an action on the whole filtered table, millions of rows, in
the one request that follows the click, without a confirmation.

``BoundedJobListMixin`` (before ``ModelAdmin`` in a job admin's bases):

- ``lookup_allowed``: the declared filters' parameters only (status, type,
  queue, the date drill-down); any other is refused (Django answers 400);
- ``?o=`` is ignored;
- "Select all" with requeue or cancel leads to the bulk confirmation page
  (a count, an estimate past 10,000) whose POST starts the durable bulk
  job (``bulk_view``, ``_start_bulk``), where the list's filters are a
  ``bulk.JobFilter``; otherwise it is refused with a message saying why.
  "Select all" with run now asks for a confirmation with the count, and
  is refused above ``run_now_select_all_limit`` jobs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from django.contrib import messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.views.main import ORDER_VAR
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.translation import gettext_lazy as _

from .. import bulk
from .bases import JobModelAdmin
from .bulk_actions import BULK_ACTIONS, BULK_PARAMETERS, _either

#: "Select all" + these actions becomes a bulk run of this operation.
SELECT_ALL_BULK = {"requeue_jobs": "requeue", "cancel_jobs": "cancel"}
#: The run-now action, which has no bulk job: capped and confirmed instead.
RUN_NOW_ACTION = "run_jobs_now"
#: The confirmation form's field that says "yes, all of them".
CONFIRMED = "durable_jobs_select_all_confirmed"


class BoundedJobListMixin(JobModelAdmin):
    """See the module: declared filters only, no sorting, "select all" through a confirmation.

    A ``ModelAdmin`` itself, so that it comes before ``ModelAdmin`` in a job
    admin's bases; it uses the job admin's bulk helpers, declared below.
    """

    #: "Select all" + run now: refused above this many jobs (filter the list further).
    run_now_select_all_limit = 1_000

    if TYPE_CHECKING:
        # JobAdmin's, which this mixin's subclasses have.
        def bulk_filter(self, params: Mapping[str, str]) -> bulk.JobFilter | None: ...
        def _filter_query(self, params: Mapping[str, str]) -> str: ...
        def _url_name(self, suffix: str) -> str: ...

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest | None = None) -> bool:
        """Only the parameters the sidebar's filters and the date drill-down write."""
        return lookup in BULK_PARAMETERS

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        if ORDER_VAR in request.GET and not self.sortable_by:
            # Django sorts by ?o= whatever sortable_by says: the whole (filtered) table.
            query = request.GET.copy()
            del query[ORDER_VAR]
            request.GET = query  # type: ignore[assignment]  # a QueryDict all the same
        return super().changelist_view(request, extra_context)

    def response_action(
        self, request: HttpRequest, queryset: QuerySet[Any], *args: Any, **kwargs: Any
    ) -> HttpResponse | None:
        # *args, **kwargs: Django 6.1 passes action_location (the list's, or a job page's).
        action = request.POST.get("action", "")
        selects_all = request.POST.get("select_across") in ("1", "True", "true", "on")
        # An action the user may not run is Django's to refuse, as always.
        if not selects_all or action not in self.get_actions(request):
            return super().response_action(request, queryset, *args, **kwargs)
        if action in SELECT_ALL_BULK:
            return self._select_all_in_bulk(request, SELECT_ALL_BULK[action])
        if action == RUN_NOW_ACTION:
            return self._select_all_run_now(request, queryset, *args, **kwargs)
        return super().response_action(request, queryset, *args, **kwargs)

    def _select_all_in_bulk(self, request: HttpRequest, operation: str) -> HttpResponse:
        """To the bulk confirmation page of the same filters, or back with why not."""
        statuses, verb = BULK_ACTIONS[operation]
        job_filter = self.bulk_filter(request.GET)
        if job_filter is None or job_filter.status not in statuses:
            self.message_user(
                request,
                _(
                    "“Select all” with “%(verb)s” runs as a bulk job, which needs the list "
                    "filtered to %(statuses)s jobs by the sidebar's filters, the search or the "
                    "dates only. Nothing was changed: filter the list, or select jobs on this "
                    "page."
                )
                % {"verb": verb, "statuses": _either(statuses)},
                messages.ERROR,
            )
            return HttpResponseRedirect(request.get_full_path())
        url = reverse(f"admin:{self._url_name(f'bulk_{operation}')}")
        query = self._filter_query(request.GET)
        return HttpResponseRedirect(f"{url}?{query}" if query else url)

    def _select_all_run_now(
        self, request: HttpRequest, queryset: QuerySet[Any], *args: Any, **kwargs: Any
    ) -> HttpResponse | None:
        """Run now on every listed job: at most ``run_now_select_all_limit``, once confirmed."""
        limit = self.run_now_select_all_limit
        matched, estimated = bulk.count_or_estimate(queryset, limit)
        if matched > limit:
            self.message_user(
                request,
                _(
                    "“Select all” with “Run now” applies to at most %(limit)d jobs at once; "
                    "this list has %(about)s%(count)d. Nothing was changed: filter the list "
                    "further."
                )
                % {"limit": limit, "count": matched, "about": _("about ") if estimated else ""},
                messages.ERROR,
            )
            return HttpResponseRedirect(request.get_full_path())
        if request.POST.get(CONFIRMED) == "yes" or not matched:
            return super().response_action(request, queryset, *args, **kwargs)
        first = queryset.order_by().values_list("pk", flat=True)[:1]
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": _("Run all %(count)d listed jobs now?") % {"count": matched},
            "matched": matched,
            "action": RUN_NOW_ACTION,
            "selected": [str(pk) for pk in first],
            "checkbox_name": ACTION_CHECKBOX_NAME,
            "confirmed_name": CONFIRMED,
            "changelist_url": request.get_full_path(),
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(
            request, "admin/durable_jobs/job/select_all_confirmation.html", context
        )
