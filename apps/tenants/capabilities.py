"""The `auth` capability record: the api-key lane (revoked on the next request), and one record per
OAuth 2.1 / OIDC lane of the trusted issuers (apps/oauth), grouped by (lane, revocation, window)."""

from __future__ import annotations

from typing import Any

from apps.core.protocol import CONTRACT_VERSION
from apps.oauth.selectors import trusted_issuers
from apps.tenants.selectors import api_key_issuer


def oauth_lanes() -> list[dict[str, Any]]:
    """identity.md §2.2: each enabled issuer under its lane, with the revocation rule and window it
    is held to. Issuers sharing all three are one record; the order is stable (sorted)."""
    groups: dict[tuple[str, str, int], list[str]] = {}
    for issuer in trusted_issuers():
        key = (issuer.lane, issuer.revocation, int(issuer.revocation_window_seconds))
        groups.setdefault(key, []).append(issuer.issuer)
    return [
        {
            "lane": lane,
            "issuers": sorted(issuers),
            "revocation": revocation,
            "revocationWindowSeconds": window,
            "minimumAssurance": "bearer",
        }
        for (lane, revocation, window), issuers in sorted(groups.items())
    ]


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
            },
            *oauth_lanes(),
        ],
    }
