"""URL map of what Django serves. REST paths are unversioned at the bare origin (versioning.md).

The protocol doors (the A2A interfaces, the card at its default path, the MCP mount) are not here:
apps/doors serves them straight from ASGI, from the routes their apps declare once
(`door_urlpatterns` in apps/a2a/urls.py and apps/mcp/urls.py). A request for one of them that
reaches Django (a Host it refuses, the HTTPS redirect) gets Django's answer before any route."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.urls import include, path
from drf_spectacular.views import SpectacularJSONAPIView

from apps.console.login_throttle import StaffAuthenticationForm, staff_sign_in
from apps.core.metrics import metrics_view
from apps.core.readiness import readyz
from apps.facets.views import well_known_openwop
from apps.tenants.api import WhoAmIApi
from openwop_host.front_door import api_docs, front_door


def healthz(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok", content_type="text/plain")


# Staff sign in through the one sign-in throttle the console uses (apps/console/login_throttle.py).
admin.site.login_form = StaffAuthenticationForm

urlpatterns = [
    path("", front_door, name="front-door"),  # an HTML page (issue 53 item 3): not the REST wire
    path("host/openwop-host/api-docs", api_docs, name="api-docs"),
    path(".well-known/openwop", well_known_openwop, name="discovery"),
    path(
        "openapi.json",
        SpectacularJSONAPIView.as_view(authentication_classes=[], permission_classes=[]),
        name="openapi",
    ),
    path("healthz", healthz, name="healthz"),
    path("readyz", readyz, name="readyz"),
    path("host/openwop-host/api/whoami", WhoAmIApi.as_view(), name="whoami"),
    path("metrics", metrics_view, name="metrics"),  # loopback / OPENWOP_METRICS_ALLOW_CIDRS only
    path("admin/login/", staff_sign_in, name="staff-sign-in"),  # before the admin's own, which it wraps
    path("admin/", admin.site.urls),
    path("console/", include("apps.console.urls")),
    path("", include("apps.agents.urls")),
    path("", include("apps.runs.urls")),
    path("", include("apps.audit.urls")),
    path("", include("apps.facets.urls")),  # the what-if page's schedule (a facets write)
    path("", include("apps.a2a.urls")),  # the cards' JWKS
    path("", include("apps.mcp.urls")),  # RFC 9728 Protected Resource Metadata
    path("", include("apps.push.urls")),
    path("", include("apps.peers.urls")),
    path("", include("apps.a2a.card_path_urls")),  # last: the card at a moved facet.agent_card_path
]
