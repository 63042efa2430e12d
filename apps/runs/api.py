"""The REST run surface (runs.md, interrupt.md): thin DRF views over the run services/selectors.

Every path naming a run resolves it in two moves: `run_id_from_path` (403 id_tenant_mismatch for
a foreign tenant segment, before any lookup) and a read scoped to the caller's tenant
(apps/runs/reads.py; 404 for anything else).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.core.caller_input import caller_text_check
from apps.core.errors import TenantMismatch, ValidationFailed
from apps.core.ids import project_id
from apps.runs.idempotency import IdempotencyClaim, IdempotentReplay, idempotency_run
from apps.runs.models import RunTransport
from apps.runs.paths import run_id_from_path
from apps.runs.reads import RUN_LIST_DEFAULT_PAGE_SIZE, RunFilters, page_read_sync, snapshot_read_sync
from apps.runs.services import (
    interrupt_resolve,
    interrupt_resolved_doc,
    run_cancel,
    run_cancelled_doc,
    run_create,
    run_create_idempotent,
    run_created_doc,
)
from apps.runs.wire import run_etag, run_snapshot_doc
from apps.tenants.authentication import request_subject
from apps.tenants.selectors import subject_tenant_pk


class ClosedSerializer(serializers.Serializer):
    """OpenWOP request bodies are closed: an unknown member is 400, not silently ignored."""

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(self.initial_data, dict):
            raise serializers.ValidationError("The body must be a JSON object.")
        unknown = sorted(set(self.initial_data) - set(self.fields))
        if unknown:
            raise serializers.ValidationError({name: "Unknown member." for name in unknown})
        return attrs


class StrictCharField(serializers.CharField):
    """A JSON string, never a number coerced to one (`{"workflowId": 7}` is a 400)."""

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return str(super().to_internal_value(data))


def _json_object(value: Any) -> None:
    if not isinstance(value, dict):
        raise serializers.ValidationError("Must be a JSON object.")


def _links(created: dict[str, Any]) -> dict[str, Any]:
    segment = project_id(created["runId"])
    return {**created, "eventsUrl": f"/runs/{segment}/events", "statusUrl": f"/runs/{segment}"}


def _maybe_idempotent(
    request: Request, *, endpoint: str, perform: Callable[[IdempotencyClaim | None], dict[str, Any]]
) -> Response:
    """Honour `Idempotency-Key` on a mutation answering 200: the first answer is replayed, with
    `OpenWOP-Idempotent-Replay: true`, for 24 h (headers.md)."""
    key = request.headers.get("Idempotency-Key")
    if key is None:
        return Response(perform(None))
    outcome = idempotency_run(
        subject=request_subject(request), endpoint=endpoint, key=key, request_body=request.data, perform=perform
    )
    if isinstance(outcome, IdempotentReplay):
        return Response(outcome.body, status=outcome.status, headers={"OpenWOP-Idempotent-Replay": "true"})
    return Response(outcome)


NODE_ID_MAX_LENGTH = 128  # Interrupt.node_id

_RUN_ID = OpenApiParameter(
    "run_ref", OpenApiTypes.STR, OpenApiParameter.PATH, description="Tenant-bound run id, `~2F`-projected."
)


class RunCollectionApi(APIView):
    """`POST /runs` (createRun) and `GET /runs` (listRuns)."""

    class CreateInputSerializer(ClosedSerializer):
        class Meta:
            ref_name = "CreateRunRequest"

        workflowId = StrictCharField(max_length=128)
        inputs = serializers.JSONField(required=False, validators=[_json_object])
        tenantId = StrictCharField(required=False, max_length=140)

    class ListInputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "ListRunsQuery"

        limit = serializers.IntegerField(required=False, default=RUN_LIST_DEFAULT_PAGE_SIZE)
        cursor = serializers.CharField(required=False)
        workflowId = serializers.CharField(required=False, max_length=128)
        status = serializers.CharField(required=False, max_length=20)

    @extend_schema(operation_id="createRun", request=CreateInputSerializer, responses={201: OpenApiTypes.OBJECT})
    def post(self, request: Request) -> Response:
        subject = request_subject(request)
        body = self.CreateInputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        if "tenantId" in data and data["tenantId"] != subject.tenant:
            raise TenantMismatch("tenantId is not the caller's tenant.")
        key = request.headers.get("Idempotency-Key")
        create: dict[str, Any] = {
            "subject": subject,
            "workflow_id": data["workflowId"],
            "inputs": data.get("inputs"),
            "transport": RunTransport.REST,
            # interop.md §Trace context: the W3C headers seed the run's trace (ignored when malformed).
            "traceparent": request.headers.get("traceparent"),
            "tracestate": request.headers.get("tracestate"),
        }
        headers: dict[str, str] = {}
        if key is None:
            created = run_created_doc(run_create(**create))
        else:
            creation = run_create_idempotent(idempotency_key=key, request_body=request.data, **create)
            created = creation.created
            if creation.replayed:
                headers["OpenWOP-Idempotent-Replay"] = "true"
        doc = _links(created)
        headers["Location"] = doc["statusUrl"]
        return Response(doc, status=201, headers=headers)

    @extend_schema(operation_id="listRuns", parameters=[ListInputSerializer], responses=OpenApiTypes.OBJECT)
    def get(self, request: Request) -> Response:
        params = self.ListInputSerializer(data=request.query_params)
        params.is_valid(raise_exception=True)
        data = params.validated_data
        subject = request_subject(request)
        status = data.get("status")
        page = page_read_sync(
            tenant_pk=subject_tenant_pk(subject),
            tenant=subject.tenant,
            filters=RunFilters(workflow_id=data.get("workflowId"), statuses=(status,) if status is not None else None),
            limit=data["limit"],
            cursor=data.get("cursor"),
        )
        runs = [run_snapshot_doc(snapshot.run, open_interrupt=snapshot.open_interrupt) for snapshot in page.snapshots]
        body: dict[str, Any] = {"runs": runs}
        if page.next_cursor is not None:
            body["nextCursor"] = page.next_cursor
        return Response(body)


class RunDetailApi(APIView):
    """`GET /runs/{runId}` (getRun) with a strong ETag and If-None-Match."""

    @extend_schema(operation_id="getRun", parameters=[_RUN_ID], responses=OpenApiTypes.OBJECT)
    def get(self, request: Request, run_ref: str) -> Response:
        subject = request_subject(request)
        run_id = run_id_from_path(subject=subject, segment=run_ref)
        snapshot = snapshot_read_sync(tenant_pk=subject_tenant_pk(subject), run_id=run_id, artifacts=False)
        etag = run_etag(snapshot.run)
        if _etag_matches(request.headers.get("If-None-Match"), etag):
            return Response(status=304, headers={"ETag": etag})
        doc = run_snapshot_doc(snapshot.run, open_interrupt=snapshot.open_interrupt)
        return Response(doc, headers={"ETag": etag})


def _etag_matches(if_none_match: str | None, etag: str) -> bool:
    if not if_none_match:
        return False
    candidates = [c.strip() for c in if_none_match.split(",")]
    return "*" in candidates or etag in candidates


class RunCancelApi(APIView):
    """`POST /runs/{runId}/cancel` (cancelRun)."""

    class InputSerializer(ClosedSerializer):
        class Meta:
            ref_name = "CancelRunRequest"

        reason = StrictCharField(required=False, max_length=500, allow_blank=True)

    @extend_schema(
        operation_id="cancelRun", parameters=[_RUN_ID], request=InputSerializer, responses=OpenApiTypes.OBJECT
    )
    def post(self, request: Request, run_ref: str) -> Response:
        subject = request_subject(request)
        run_id = run_id_from_path(subject=subject, segment=run_ref)
        body = self.InputSerializer(data=request.data if request.data else {})
        body.is_valid(raise_exception=True)
        reason = body.validated_data.get("reason") or None
        return _maybe_idempotent(
            request,
            endpoint=f"POST /runs/{run_id}/cancel",
            perform=lambda claim: run_cancelled_doc(
                run_cancel(subject=subject, run_id=run_id, reason=reason, idempotency=claim)
            ),
        )


class RunInterruptResolveApi(APIView):
    """`POST /runs/{runId}/interrupts/{nodeId}` (resolveInterruptByRun)."""

    class InputSerializer(ClosedSerializer):
        class Meta:
            ref_name = "ResolveInterruptRequest"

        resumeValue = serializers.JSONField()

    @extend_schema(
        operation_id="resolveInterruptByRun",
        parameters=[_RUN_ID],
        request=InputSerializer,
        responses=OpenApiTypes.OBJECT,
    )
    def post(self, request: Request, run_ref: str, node_id: str) -> Response:
        subject = request_subject(request)
        run_id = run_id_from_path(subject=subject, segment=run_ref)
        caller_text_check(node_id, field="nodeId", max_length=NODE_ID_MAX_LENGTH)  # `%00` in the path
        body = self.InputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        if "resumeValue" not in request.data:
            raise ValidationFailed("resumeValue is required.", details={"field": "resumeValue"})
        resume_value = body.validated_data["resumeValue"]
        return _maybe_idempotent(
            request,
            endpoint=f"POST /runs/{run_id}/interrupts/{node_id}",
            perform=lambda claim: interrupt_resolved_doc(
                interrupt_resolve(
                    subject=subject, run_id=run_id, node_id=node_id, resume_value=resume_value, idempotency=claim
                ),
                node_id,
            ),
        )
