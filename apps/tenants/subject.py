"""The OpenWOP Subject (identity.md §1-2): who is calling, resolved from the credential alone."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

SubjectKind = Literal["user", "agent"]


@dataclass(frozen=True, slots=True)
class Subject:
    issuer: str
    subject_id: str
    tenant: str
    kind: SubjectKind
    lane: str = "api-key"

    def as_wire(self) -> dict[str, Any]:
        """The closed Subject object as it appears in owners, events and audit records."""
        return {
            "issuer": self.issuer,
            "subjectId": self.subject_id,
            "tenant": self.tenant,
            "lane": self.lane,
            "kind": self.kind,
        }
