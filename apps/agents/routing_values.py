"""The `a2aTenant` routing value R of an agent (interop.md §Per-agent cards; RFC 0202).

R = base64url(HMAC-SHA256(K, "<agent pk>:<minting version>"))[:32], K derived from SECRET_KEY and a
purpose string. So R is stable for the agent (across processes, restarts and upgrades: it is
derived, never stored or random), unique per agent (192 bits), path-segment-safe (base64url has
no `/`, `%` or `~`), and encodes no tenant, workspace or subject: without the key it reveals
nothing, and it is resolved only by recomputing it over the caller's own inventory
(`agents.selectors.agent_by_a2a_tenant`), so a foreign R can never match.
"""

from __future__ import annotations

import base64
import re

from django.utils.crypto import salted_hmac

A2A_TENANT_PURPOSE = "openwop.agents.a2a-tenant.v1"
A2A_TENANT_LENGTH = 32
# The host version every R has been minted under. A peer keeps an agent's card URL, which carries R,
# and a rolling upgrade serves the old and the new release side by side: R must not change with the
# release number (openwop_host.__version__), so it mixes in this constant.
A2A_TENANT_MINTING_VERSION = "0.1.0"
A2A_TENANT_RE = re.compile(rf"^[A-Za-z0-9_-]{{{A2A_TENANT_LENGTH}}}$")


def a2a_tenant_of(*, agent_pk: int) -> str:
    mac = salted_hmac(A2A_TENANT_PURPOSE, f"{agent_pk}:{A2A_TENANT_MINTING_VERSION}", algorithm="sha256").digest()
    return base64.urlsafe_b64encode(mac).decode("ascii").rstrip("=")[:A2A_TENANT_LENGTH]
