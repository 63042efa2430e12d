"""`GET /workflows/{workflowId}` (getWorkflow), `GET /agents` (listAgents) and
`GET /agents/{agentId}` (getAgent)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.agents.selectors import InventoryEntry, agent_get_readable, agent_inventory, workflow_get_readable
from apps.tenants.authentication import request_subject


class WorkflowDetailApi(APIView):
    class OutputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "Workflow"

        workflowId = serializers.CharField(source="workflow_id")
        name = serializers.CharField()
        description = serializers.CharField()
        inputSchema = serializers.JSONField(source="input_schema")
        nodes = serializers.SerializerMethodField()

        def get_nodes(self, workflow) -> list[dict[str, str]]:
            return [{"nodeId": node["id"], "kind": node["kind"]} for node in workflow.definition["nodes"]]

    @extend_schema(operation_id="getWorkflow", responses=OutputSerializer)
    def get(self, request: Request, workflow_id: str) -> Response:
        workflow = workflow_get_readable(subject=request_subject(request), workflow_id=workflow_id)
        return Response(self.OutputSerializer(workflow).data)


class AgentInventoryEntrySerializer(serializers.Serializer):
    """One inventory entry (RFC 0072 §A, as openwop-client's `AgentInventoryEntry` reads it).

    Read-only and SR-1 clean: no system prompt, no handoff schema, no credential. `roster[]` lists
    the workflows routed to the agent for this caller; `a2aTenant` appears only when one is.
    """

    class Meta:
        ref_name = "AgentInventoryEntry"

    agentId = serializers.CharField(source="agent.agent_id")
    persona = serializers.CharField(source="agent.persona")
    # The stubs see Field.label (a serializer is a Field); the metaclass moves a declared field into
    # _declared_fields, so nothing is shadowed at runtime.
    label = serializers.SerializerMethodField()  # type: ignore[assignment]
    description = serializers.SerializerMethodField()
    packName = serializers.CharField(source="agent.pack_name")
    packVersion = serializers.CharField(source="agent.pack_version")
    toolAllowlist = serializers.SerializerMethodField()
    hasHandoffSchemas = serializers.SerializerMethodField()
    roster = serializers.SerializerMethodField()
    degraded = serializers.JSONField(source="agent.degraded")
    memoryDegraded = serializers.BooleanField(source="agent.memory_degraded")
    a2aTenant = serializers.CharField(source="a2a_tenant", required=False)

    def get_label(self, entry: InventoryEntry) -> str:
        return entry.agent.label or entry.agent.persona

    def get_description(self, entry: InventoryEntry) -> str | None:
        return entry.agent.description or None

    def get_toolAllowlist(self, entry: InventoryEntry) -> list[str]:
        return []  # this host's agents call no tools of their own

    def get_hasHandoffSchemas(self, entry: InventoryEntry) -> bool:
        return bool(entry.agent.handoff_schemas)  # that they exist, never what they say (SR-1)

    def get_roster(self, entry: InventoryEntry) -> list[dict[str, Any]]:
        return [{"workflows": [w.workflow_id for w in entry.workflows]}]

    def to_representation(self, instance: InventoryEntry) -> dict[str, Any]:
        data = super().to_representation(instance)
        if instance.a2a_tenant is None:
            data.pop("a2aTenant", None)
        if data.get("description") is None:
            data.pop("description", None)
        if not data.get("packName"):
            data.pop("packName", None)  # an agent made here, not installed from a pack
        return data


class AgentListApi(APIView):
    class OutputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "AgentList"

        agents = AgentInventoryEntrySerializer(many=True)

    @extend_schema(operation_id="listAgents", responses=OutputSerializer)
    def get(self, request: Request) -> Response:
        return Response(self.OutputSerializer({"agents": agent_inventory(subject=request_subject(request))}).data)


class AgentDetailApi(APIView):
    @extend_schema(operation_id="getAgent", responses=AgentInventoryEntrySerializer)
    def get(self, request: Request, agent_id: str) -> Response:
        entry = agent_get_readable(subject=request_subject(request), agent_id=agent_id)
        return Response(AgentInventoryEntrySerializer(entry).data)
