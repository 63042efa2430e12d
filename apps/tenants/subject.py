"""The OpenWOP Subject (identity.md §1-2): who is calling, resolved from the credential alone."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

SubjectKind = Literal["user", "agent"]


@dataclass(frozen=True, slots=True)
class Subject:
    issuer: str
    subject_id: str
    tenant: str
    kind: SubjectKind
    lane: str = "api-key"  # or "oidc" / "oauth2" (apps/oauth): issuer is then the token's `iss`
    # The tenant row's pk, when the credential's own read already had it (the API-key lookup
    # joins the tenant): saves every tenant-scoped read a second lookup by slug. Never on the
    # wire, never part of equality; a Subject built without it falls back to the slug.
    tenant_pk: int | None = field(default=None, compare=False, repr=False)
    # The access token's scopes (OAuth lanes); None = unrestricted (API keys). Never on the wire.
    scopes: frozenset[str] | None = field(default=None, compare=False, repr=False)

    def as_wire(self) -> dict[str, Any]:
        """The closed Subject object as it appears in owners, events and audit records."""
        return {
            "issuer": self.issuer,
            "subjectId": self.subject_id,
            "tenant": self.tenant,
            "lane": self.lane,
            "kind": self.kind,
        }
