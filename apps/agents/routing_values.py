"""The `a2aTenant` routing value R of an agent (interop.md §Per-agent cards; RFC 0202).

R is kept in `Agent.a2a_tenant` and never changes: not when DJANGO_SECRET_KEY rotates, not when the
host's version changes. Peers hold it (a per-agent card's `tenant`), so it must not move under them.

- A new agent gets 192 random bits (`a2a_tenant_mint`, base64url, 32 characters): it derives from
  no secret and encodes no tenant, workspace or subject.
- An agent created before R was stored has NULL there. Its R is the value earlier releases
  derived: base64url(HMAC-SHA256(K, "<agent pk>:0.1.0"))[:32], K derived from SECRET_KEY and a
  purpose string, "0.1.0" the version those releases served (frozen here, so a version change
  moves nothing). `manage.py reseal` stores it (`a2a_tenants_store`, batched), after which the
  row no longer depends on the key; until then the value is derived on each read, exactly as
  earlier releases' processes derive it, so during a rolling upgrade old and new processes publish
  and route the same R for every such agent.

R is path-segment-safe (base64url has no `/`, `%` or `~`) and is resolved only by comparing it
with the caller's own inventory (`agents.selectors.agent_by_a2a_tenant`), so a foreign R never
matches.
"""

from __future__ import annotations

import base64
import re
import secrets
from typing import TYPE_CHECKING

from django.utils.crypto import salted_hmac

if TYPE_CHECKING:
    from apps.agents.models import Agent

A2A_TENANT_PURPOSE = "openwop.agents.a2a-tenant.v1"
A2A_TENANT_LENGTH = 32
A2A_TENANT_RE = re.compile(rf"^[A-Za-z0-9_-]{{{A2A_TENANT_LENGTH}}}$")
# The host version every earlier release served and derived R with; never the current version.
LEGACY_HOST_VERSION = "0.1.0"


def a2a_tenant_mint() -> str:
    """A new agent's R: random, so it derives from nothing that can change."""
    return base64.urlsafe_b64encode(secrets.token_bytes(24)).decode("ascii")


def a2a_tenant_legacy(*, agent_pk: int) -> str:
    """R as earlier releases derived it (under the current SECRET_KEY), for a row that has none stored."""
    mac = salted_hmac(A2A_TENANT_PURPOSE, f"{agent_pk}:{LEGACY_HOST_VERSION}", algorithm="sha256").digest()
    return base64.urlsafe_b64encode(mac).decode("ascii").rstrip("=")[:A2A_TENANT_LENGTH]


def a2a_tenant_of(*, agent: Agent) -> str:
    """The agent's R: stored, or (not stored yet) as earlier releases derived it."""
    return agent.a2a_tenant or a2a_tenant_legacy(agent_pk=agent.pk)
