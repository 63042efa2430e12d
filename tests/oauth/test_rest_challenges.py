"""The REST door on a host with an OAuth lane (identity.md §2.5): every 401 points at the RFC 9728
metadata (`error="invalid_token"` only when a credential was presented), and a token lacking a
scope its issuer requires for the `rest` family is 403 `forbidden` with the scope challenge. In
process, against the real authorization server on loopback; a host with no issuer keeps its plain
challenge."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.test import Client

from apps.oauth.selectors import door_audience, protected_resource_metadata_url
from apps.oauth.verify import oauth_caches_clear
from apps.tenants.models import Tenant
from tests.oauth.auth_server import AuthServer
from tests.oauth.test_verify import trust

pytestmark = pytest.mark.django_db

WHOAMI = "/host/openwop-host/api/whoami"


@pytest.fixture(autouse=True)
def _fresh_caches() -> Iterator[None]:
    oauth_caches_clear()
    yield
    oauth_caches_clear()


def test_without_an_issuer_the_401_is_the_plain_challenge(tenant: Tenant) -> None:
    response = Client().get(WHOAMI)
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="openwop"'


def test_a_401_points_at_the_resource_metadata(auth_server: AuthServer, tenant: Tenant) -> None:
    trust(auth_server, tenant)
    metadata = protected_resource_metadata_url("rest")
    bare = Client().get(WHOAMI)
    assert bare.status_code == 401 and bare.json()["error"] == "unauthenticated"
    assert bare["WWW-Authenticate"] == f'Bearer realm="openwop", resource_metadata="{metadata}"'

    expired = auth_server.mint(aud=door_audience("rest"), lifetime=-120)
    refused = Client().get(WHOAMI, headers={"Authorization": f"Bearer {expired}"})
    assert refused.status_code == 401 and refused.json()["error"] == "identity_unverified"
    assert refused["WWW-Authenticate"] == (
        f'Bearer realm="openwop", error="invalid_token", resource_metadata="{metadata}"'
    )


def test_a_missing_rest_scope_is_403_with_the_scope_challenge(auth_server: AuthServer, tenant: Tenant) -> None:
    trust(auth_server, tenant, required_scopes={"rest": ["api:read", "api:write"]})
    lacking = auth_server.mint(aud=door_audience("rest"), scope="api:read")
    response = Client().get(WHOAMI, headers={"Authorization": f"Bearer {lacking}"})
    assert response.status_code == 403
    assert response.json()["error"] == "forbidden"
    assert response.json()["details"]["requiredScopes"] == ["api:read", "api:write"]
    challenge = response["WWW-Authenticate"]
    assert 'error="insufficient_scope"' in challenge and 'scope="api:read api:write"' in challenge

    enough = auth_server.mint(aud=door_audience("rest"), scope="api:read api:write")
    ok = Client().get(WHOAMI, headers={"Authorization": f"Bearer {enough}"})
    assert ok.status_code == 200, ok.content
    assert ok.json()["subject"]["lane"] == "oidc"


@pytest.mark.parametrize(
    "path", ["/runs/acme~2Fnot-a-run-aaaaaaaaaaaaaaaa/events", "/runs/acme~2Fnot-a-run-aaaaaaaaaaaaaaaa/events/poll",
             "/host/events"],
)  # fmt: skip
def test_the_streams_401_carry_it_too(auth_server: AuthServer, tenant: Tenant, path: str) -> None:
    trust(auth_server, tenant)
    metadata = protected_resource_metadata_url("rest")
    bare = Client().get(path)
    assert bare.status_code == 401, bare.content
    assert bare["WWW-Authenticate"] == f'Bearer realm="openwop", resource_metadata="{metadata}"'
    wrong_door = auth_server.mint(aud=door_audience("mcp"))  # a token for the MCP mount, not the API
    refused = Client().get(path, headers={"Authorization": f"Bearer {wrong_door}"})
    assert refused.status_code == 401 and refused.json()["error"] == "audience_mismatch"
    assert 'error="invalid_token"' in refused["WWW-Authenticate"]
