"""The protocol routes are declared once, and the door alone serves them (issue 35 items 3, 5).

Django's URLconf does not have them; a request for one that Django would refuse or redirect
before any route (a Host outside ALLOWED_HOSTS, plain HTTP under SECURE_SSL_REDIRECT) is handed to
Django whole by the door, and gets Django's refusal, the same as any path Django routes: never a
404 of the URLconf that no longer has the route.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.core.asgi import get_asgi_application
from django.test import Client
from django.urls import NoReverseMatch, resolve, reverse

from apps.core.door_request import door_route_match, door_routes
from apps.doors.asgi import doors_application
from tests.door_client import DoorClient

pytestmark = pytest.mark.django_db

CLAIMED = ["/a2a/jsonrpc", "/a2a/jsonrpc/", "/a2a/rest/tasks", "/a2a/elsewhere", "/.well-known/agent-card.json", "/mcp"]
DOOR_ROUTES = {"a2a-agent-card", "a2a-jsonrpc", "a2a-rest", "a2a-unknown", "mcp-endpoint"}


def test_the_door_routes_are_declared_once_and_django_has_none_of_them() -> None:
    assert {pattern.name for pattern in door_routes()} == DOOR_ROUTES
    for name in DOOR_ROUTES:
        with pytest.raises(NoReverseMatch):
            reverse(name)
    for path in CLAIMED:
        match = door_route_match(path)
        assert match is not None and match.url_name in DOOR_ROUTES, path
        # Django's URLconf: only its last catch-all (the card at a moved facet path) takes it.
        assert resolve(path).url_name == "a2a-agent-card-facet-path", path
    assert door_route_match("/runs") is None and door_route_match("/.well-known/jwks.json") is None


@pytest.mark.parametrize("path", CLAIMED)
def test_a_foreign_host_gets_djangos_refusal_on_a_door_path(path: str) -> None:
    foreign = {"Host": "evil.example"}
    refused = DoorClient().post(path, data="{}", content_type="application/json", headers=foreign)
    django = Client().post(path, data="{}", content_type="application/json", headers=foreign)  # Django alone
    assert refused.status_code == django.status_code == 400
    assert refused.content == django.content and b"Bad Request" in refused.content


@pytest.mark.parametrize("path", CLAIMED)
def test_plain_http_is_redirected_by_django_on_a_door_path(path: str, settings: Any) -> None:
    settings.SECURE_SSL_REDIRECT = True
    # Django's SecurityMiddleware reads the setting when the handler starts: a host started with it.
    host = doors_application(get_asgi_application())
    redirected = DoorClient(application=host).post(path, data="{}", content_type="application/json")
    assert redirected.status_code == 301
    assert redirected["Location"] == f"https://testserver{path}"
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    behind_proxy = DoorClient(application=doors_application(get_asgi_application()))
    served = behind_proxy.post(path, data="{}", content_type="application/json", headers={"X-Forwarded-Proto": "https"})
    assert served.status_code != 301  # the door's own answer
