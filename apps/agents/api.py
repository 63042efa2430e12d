"""`GET /workflows/{workflowId}` (getWorkflow)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.agents.selectors import workflow_get_readable


class WorkflowDetailApi(APIView):
    class OutputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "Workflow"

        workflowId = serializers.CharField(source="workflow_id")
        name = serializers.CharField()
        description = serializers.CharField()
        inputSchema = serializers.JSONField(source="input_schema")
        nodes = serializers.SerializerMethodField()

        def get_nodes(self, workflow) -> list[dict[str, str]]:  # type: ignore[no-untyped-def]
            return [{"nodeId": node["id"], "kind": node["kind"]} for node in workflow.definition["nodes"]]

    @extend_schema(operation_id="getWorkflow", responses=OutputSerializer)
    def get(self, request: Request, workflow_id: str) -> Response:
        workflow = workflow_get_readable(subject=request.auth, workflow_id=workflow_id)
        return Response(self.OutputSerializer(workflow).data)
