"""The `auth` capability record: the api-key lane, revoked on the next request."""

from __future__ import annotations

from typing import Any

from apps.tenants.selectors import api_key_issuer


def auth_capability() -> dict[str, Any]:
    return {
        "status": "stable",
        "since": "2.0",
        "witness": "seam-gated",
        "lanes": [
            {
                "lane": "api-key",
                "issuers": [api_key_issuer()],
                "revocation": "next-request",
                "minimumAssurance": "bearer",
            }
        ],
    }
