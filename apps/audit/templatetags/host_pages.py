"""The host-private pages the admin index links to, each shown only to the staff it admits
(issue 32 item 10): the pages check the same predicates themselves."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django import template
from django.urls import reverse

from apps.audit.auditor_views import is_auditor
from apps.audit.deprecation_views import may_see_deprecation

register = template.Library()


@dataclass(frozen=True, slots=True)
class HostPage:
    title: str
    url: str
    description: str


@register.simple_tag
def host_pages_for(user: Any) -> list[HostPage]:
    pages = []
    if user.is_authenticated and is_auditor(user):
        pages.append(
            HostPage(
                "Negotiation records",
                reverse("negotiation-audit"),
                "Every version negotiation the host decided: filters, charts, CSV.",
            )
        )
    if may_see_deprecation(user):
        pages.append(
            HostPage(
                "Version deprecation",
                reverse("deprecation"),
                "Who still asks for which version, and who a new floor would refuse.",
            )
        )
    return pages
