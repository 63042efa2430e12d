from django.urls import URLPattern, path

from apps.facets.floor_views import deprecation_schedule

urlpatterns: list[URLPattern] = [
    path("host/openwop-host/deprecation/schedule/", deprecation_schedule, name="deprecation-schedule"),
]
