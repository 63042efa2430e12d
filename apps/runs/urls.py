from django.urls import path, register_converter

from apps.runs.api import RunCancelApi, RunCollectionApi, RunDetailApi, RunInterruptResolveApi
from apps.runs.paths import RunRefConverter
from apps.runs.views import run_events_poll, run_events_stream

register_converter(RunRefConverter, "runref")

urlpatterns = [
    path("runs", RunCollectionApi.as_view(), name="runs"),
    path("runs/<runref:run_ref>", RunDetailApi.as_view(), name="run-detail"),
    path("runs/<runref:run_ref>/cancel", RunCancelApi.as_view(), name="run-cancel"),
    path("runs/<runref:run_ref>/events", run_events_stream, name="run-events"),
    path("runs/<runref:run_ref>/events/poll", run_events_poll, name="run-events-poll"),
    path(
        "runs/<runref:run_ref>/interrupts/<str:node_id>",
        RunInterruptResolveApi.as_view(),
        name="run-interrupt-resolve",
    ),
]
