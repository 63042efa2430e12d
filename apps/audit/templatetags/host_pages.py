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


# (who may see it, title, URL name, description), in the order the index lists them.
_PAGES = (
    (
        lambda user: user.is_authenticated and is_auditor(user),
        "Negotiation records",
        "negotiation-audit",
        "Every version negotiation the host decided: filters, charts, CSV.",
    ),
    (
        may_see_deprecation,
        "Version deprecation",
        "deprecation",
        "Who still asks for which version, and who a new floor would refuse.",
    ),
)


@register.simple_tag
def host_pages_for(user: Any) -> list[HostPage]:
    return [HostPage(title, reverse(name), about) for may_see, title, name, about in _PAGES if may_see(user)]
