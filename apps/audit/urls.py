from django.urls import URLPattern, path

from apps.audit.api import EmitTestHostEventApi
from apps.audit.auditor_views import archive_export_download, negotiation_audit
from apps.audit.deprecation_views import deprecation_overview, deprecation_schedule, deprecation_version
from apps.audit.views import host_events

urlpatterns: list[URLPattern] = [
    path("host/events", host_events, name="host-events"),
    path("host/events/test", EmitTestHostEventApi.as_view(), name="host-events-test"),
    path("host/openwop-host/audit/negotiations", negotiation_audit, name="negotiation-audit"),
    path(
        "host/openwop-host/audit/exports/<int:pk>/records.jsonl.gz",
        archive_export_download,
        {"part": "records"},
        name="archive-export-records",
    ),
    path(
        "host/openwop-host/audit/exports/<int:pk>/manifest.json",
        archive_export_download,
        {"part": "manifest"},
        name="archive-export-manifest",
    ),
    path("host/openwop-host/deprecation/", deprecation_overview, name="deprecation"),
    path("host/openwop-host/deprecation/version/", deprecation_version, name="deprecation-version"),
    path("host/openwop-host/deprecation/schedule/", deprecation_schedule, name="deprecation-schedule"),
]
