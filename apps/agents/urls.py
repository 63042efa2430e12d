from django.urls import path

from apps.agents.api import AgentDetailApi, AgentListApi, WorkflowDetailApi

urlpatterns = [
    path("workflows/<str:workflow_id>", WorkflowDetailApi.as_view(), name="workflow-detail"),
    path("agents", AgentListApi.as_view(), name="agent-list"),
    path("agents/<str:agent_id>", AgentDetailApi.as_view(), name="agent-detail"),
]
