"""The agent card at the path the `a2a` facet names, when an operator moved it.

`facet.agent_card_path` is editable in the admin and discovery advertises it (`a2a.agentCardUrl`),
so the card must be served there too; the default `/.well-known/agent-card.json` stays routed in
apps/a2a/urls.py. This catch-all is included LAST in the root URLconf: it sees only paths no other
route took, and answers exactly what an unmatched path answers (Django's 404, enveloped by the
protocol middleware where that applies) unless the path is the facet's card path.
"""

from __future__ import annotations

from django.urls import URLPattern, re_path

from apps.a2a import views

urlpatterns: list[URLPattern] = [
    re_path(r"^(?P<card_path>.+)$", views.agent_card_at_facet_path, name="a2a-agent-card-facet-path"),
]
