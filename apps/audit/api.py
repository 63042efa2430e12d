"""`POST /host/events/test` (emitTestHostEvent, RFC 0241 §B), served only with the conformance seams on."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema, extend_schema_serializer
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.audit.host_event_types import HOST_TEST_TYPES, Delivery, host_event_type
from apps.audit.services import host_event_emit_test
from apps.core.errors import NotFound
from apps.tenants.authentication import request_subject


class EmitTestHostEventApi(APIView):
    @extend_schema_serializer(component_name="EmitTestHostEventRequest")
    class InputSerializer(serializers.Serializer):
        delivery = serializers.ChoiceField(choices=[d.value for d in Delivery])
        workspaceId = serializers.CharField(required=False, allow_blank=False, max_length=300)

        def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
            unknown = set(self.initial_data) - set(self.fields)
            if unknown:  # the request body is closed (RFC 0241 §B.2)
                raise serializers.ValidationError({name: ["Unknown field."] for name in sorted(unknown)})
            return attrs

    @extend_schema_serializer(component_name="EmitTestHostEventResponse")
    class OutputSerializer(serializers.Serializer):
        eventId = serializers.CharField()
        type = serializers.CharField()

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        # RFC 0241 §B.1: the operation exists exactly while a host-test type is listed (with the
        # conformance seams on); checked before authentication, so it is a 404 for everyone.
        if not any(host_event_type(name).advertised() for name in HOST_TEST_TYPES.values()):
            raise NotFound(f"No resource at {request.path}.")
        super().initial(request, *args, **kwargs)

    @extend_schema(request=InputSerializer, responses={202: OutputSerializer}, operation_id="emitTestHostEvent")
    def post(self, request: Request) -> Response:
        subject = request_subject(request)
        body = self.InputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        event = host_event_emit_test(
            subject=subject,
            delivery=Delivery(body.validated_data["delivery"]),
            workspace_id=body.validated_data.get("workspaceId"),
        )
        return Response(
            self.OutputSerializer({"eventId": event.event_id, "type": event.type}).data,
            status=status.HTTP_202_ACCEPTED,
        )
