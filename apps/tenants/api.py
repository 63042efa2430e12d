"""`GET /host/openwop-host/api/whoami`: the Subject the presented credential resolves to."""

from __future__ import annotations

from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.tenants.subject import Subject


class WhoAmIApi(APIView):
    def get(self, request: Request) -> Response:
        subject: Subject = request.auth
        return Response({"subject": subject.as_wire()})
