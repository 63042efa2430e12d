"""OpenAPI description of the bearer API-key scheme (drf-spectacular extension)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class ApiKeyAuthenticationScheme(OpenApiAuthenticationExtension):
    target_class = "apps.tenants.authentication.ApiKeyAuthentication"
    name = "bearerApiKey"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer", "description": "An API key: Authorization: Bearer <key>."}
