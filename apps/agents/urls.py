from django.urls import path

from apps.agents.api import WorkflowDetailApi

urlpatterns = [
    path("workflows/<str:workflow_id>", WorkflowDetailApi.as_view(), name="workflow-detail"),
]
