"""The REST webhook surface (webhooks.md §Surfaces): thin DRF views over push services/selectors.

webhookIds are opaque and name no tenant, so another tenant's id and an unknown one take the same
NotFound path and render the same 404 bytes (STYLE.md habit 5).
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.push.selectors import DEAD_LETTER_DEFAULT_PAGE_SIZE, webhook_dead_letters
from apps.push.services import webhook_register, webhook_unregister
from apps.runs.api import ClosedSerializer, StrictCharField
from apps.tenants.authentication import request_subject


class WebhookCollectionApi(APIView):
    """`POST /webhooks` (registerWebhook)."""

    class InputSerializer(ClosedSerializer):
        class Meta:
            ref_name = "RegisterWebhookRequest"

        url = StrictCharField(max_length=2048)
        events = serializers.ListField(child=StrictCharField(max_length=100), allow_empty=False, max_length=100)
        secret = StrictCharField(required=False, max_length=512)

    @extend_schema(operation_id="registerWebhook", request=InputSerializer, responses={201: OpenApiTypes.OBJECT})
    def post(self, request: Request) -> Response:
        body = self.InputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        webhook = webhook_register(
            subject=request_subject(request), url=data["url"], events=list(data["events"]), secret=data.get("secret")
        )
        return Response({"webhookId": webhook.webhook_id}, status=201)


class WebhookDetailApi(APIView):
    """`DELETE /webhooks/{webhookId}` (unregisterWebhook)."""

    @extend_schema(operation_id="unregisterWebhook", responses={204: None})
    def delete(self, request: Request, webhook_id: str) -> Response:
        webhook_unregister(subject=request_subject(request), webhook_id=webhook_id)
        return Response(status=204)


class WebhookDeadLettersApi(APIView):
    """`GET /webhooks/{webhookId}/dead-letters` (listWebhookDeadLetters)."""

    class ListInputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "ListWebhookDeadLettersQuery"

        limit = serializers.IntegerField(required=False, min_value=1, default=DEAD_LETTER_DEFAULT_PAGE_SIZE)
        cursor = serializers.CharField(required=False, max_length=1024)

    @extend_schema(
        operation_id="listWebhookDeadLetters", parameters=[ListInputSerializer], responses=OpenApiTypes.OBJECT
    )
    def get(self, request: Request, webhook_id: str) -> Response:
        params = self.ListInputSerializer(data=request.query_params)
        params.is_valid(raise_exception=True)
        data = params.validated_data
        page = webhook_dead_letters(
            subject=request_subject(request), webhook_id=webhook_id, limit=data["limit"], cursor=data.get("cursor")
        )
        body: dict[str, Any] = {"deadLetters": page.records}
        if page.next_cursor is not None:
            body["nextCursor"] = page.next_cursor
        return Response(body)
