"""Rendering of the OpenWOP error envelope outside DRF (middleware, plain Django views)."""

from __future__ import annotations

import json

from django.http import HttpResponse

from apps.core.errors import OpenWopError


def envelope_response(error: OpenWopError) -> HttpResponse:
    response = HttpResponse(
        json.dumps(error.envelope(), separators=(",", ":")),
        status=error.status,
        content_type="application/json",
    )
    for name, value in error.headers.items():
        response[name] = value
    return response
