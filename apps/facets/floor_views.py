"""The what-if page's "schedule this floor" (apps/audit/deprecation_views.py shows the page; the
schedule is the facets' own write, `facet_floor_schedule`: the same checks as `facet_set --at` and
the facet admin, audited). Here, above apps.audit, so that audit never imports facets."""

from __future__ import annotations

from urllib.parse import urlencode

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponseBase
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_POST

from apps.audit.deprecation_views import ScheduleFloorForm, may_schedule, operators_and_auditors
from apps.core.actors import admin_actor
from apps.core.errors import ValidationFailed
from apps.facets.services import facet_floor_schedule


@require_POST
@operators_and_auditors
def deprecation_schedule(request: HttpRequest) -> HttpResponseBase:
    """Schedule the floor what-if tried as the host's (facet_floor_schedule, audited), then show
    the facet with its schedule; a refusal goes back to the what-if with the service's message."""
    if not may_schedule(request.user):
        raise PermissionDenied("Scheduling the host floor is for staff who may change the facets.")
    form = ScheduleFloorForm(request.POST)
    back = reverse("deprecation")
    if not form.is_valid():
        problems = " ".join(f"{form[name].label}: {' '.join(map(str, errors))}" for name, errors in form.errors.items())
        messages.error(request, f"Nothing was scheduled. {problems}")
        tried = {"whatif_protocol": request.POST.get("protocol", ""), "floor": request.POST.get("floor", "")}
        return redirect(f"{back}?{urlencode(tried)}")
    protocol, floor, at = form.cleaned_data["protocol"], form.cleaned_data["floor"], form.cleaned_data["at"]
    try:
        facet_floor_schedule(protocol=protocol, minimum=floor, at=at, actor=admin_actor(request.user.get_username()))
    except ValidationFailed as exc:
        messages.error(request, f"Nothing was scheduled. {exc.message}")
        return redirect(f"{back}?{urlencode({'whatif_protocol': protocol, 'floor': floor})}")
    messages.success(request, f"Scheduled the {protocol} host floor {floor} from {at:%Y-%m-%d %H:%M:%S} UTC.")
    return redirect(reverse("admin:facets_facet_change", args=[protocol]))
