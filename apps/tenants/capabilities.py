"""The `auth` capability record: the api-key lane, revoked on the next request."""

from __future__ import annotations

from typing import Any

from apps.core.protocol import CONTRACT_VERSION
from apps.tenants.selectors import api_key_issuer


def auth_capability() -> dict[str, Any]:
    return {
        "status": "stable",
        "since": CONTRACT_VERSION,
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
