"""`GET /host/openwop-host/api/whoami`: the Subject the presented credential resolves to."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.tenants.authentication import request_subject


class WhoAmIApi(APIView):
    class SubjectOutput(serializers.Serializer):
        issuer = serializers.CharField()
        subjectId = serializers.CharField()
        tenant = serializers.CharField()
        lane = serializers.CharField()
        kind = serializers.CharField()

    @extend_schema(
        operation_id="hostWhoAmI",
        responses=inline_serializer("WhoAmI", fields={"subject": SubjectOutput()}),
    )
    def get(self, request: Request) -> Response:
        subject = request_subject(request)
        return Response({"subject": subject.as_wire()})
