"""The A2A interface URLs the card lists, the card itself (interop.md §The facets), and the JWKS
the cards' signatures name.

`door_urlpatterns` are served by the door straight from ASGI (apps/doors/asgi.py; handed to it in
apps/a2a/apps.py), every method; Django's URLconf includes `urlpatterns` only. The JSON-RPC url
answers with and without a trailing slash (the TCK posts to `<url>/`; a redirect would break it).
HTTP+JSON paths are matched by the view, since a task id may carry a `/`.
"""

from __future__ import annotations

from django.urls import URLPattern, path, re_path

from apps.a2a import views

door_urlpatterns: list[URLPattern] = [
    path(".well-known/agent-card.json", views.agent_card, name="a2a-agent-card"),
    re_path(r"^a2a/jsonrpc/?$", views.jsonrpc_endpoint, name="a2a-jsonrpc"),
    re_path(r"^a2a/rest/(?P<route>.*)$", views.rest_endpoint, name="a2a-rest"),
    re_path(r"^a2a(?:/(?P<rest>.*))?$", views.a2a_unknown, name="a2a-unknown"),
]

urlpatterns: list[URLPattern] = [
    path(".well-known/jwks.json", views.card_jwks, name="a2a-card-jwks"),  # the cards' `jku`
]
