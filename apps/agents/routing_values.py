"""The `a2aTenant` routing value R of an agent (interop.md §Per-agent cards; RFC 0202).

R = base64url(HMAC-SHA256(K, "<agent pk>:<host version>"))[:32], K derived from SECRET_KEY and a
purpose string. So R is stable for the agent and host version (across processes and restarts: it
is derived, never stored or random), unique per agent (192 bits), path-segment-safe (base64url has
no `/`, `%` or `~`), and encodes no tenant, workspace or subject: without the key it reveals
nothing, and it is resolved only by recomputing it over the caller's own inventory
(`agents.selectors.agent_by_a2a_tenant`), so a foreign R can never match.
"""

from __future__ import annotations

import base64
import re

from django.conf import settings
from django.utils.crypto import salted_hmac

A2A_TENANT_PURPOSE = "openwop.agents.a2a-tenant.v1"
A2A_TENANT_LENGTH = 32
A2A_TENANT_RE = re.compile(rf"^[A-Za-z0-9_-]{{{A2A_TENANT_LENGTH}}}$")


def a2a_tenant_of(*, agent_pk: int) -> str:
    host_version = settings.SPECTACULAR_SETTINGS["VERSION"]
    mac = salted_hmac(A2A_TENANT_PURPOSE, f"{agent_pk}:{host_version}", algorithm="sha256").digest()
    return base64.urlsafe_b64encode(mac).decode("ascii").rstrip("=")[:A2A_TENANT_LENGTH]
