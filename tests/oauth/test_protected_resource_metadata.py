"""RFC 9728 Protected Resource Metadata and the MCP mount's challenges (issue 25; identity.md §2.5),
in-process against the lead's authorization server (tests/oauth/auth_server.py): the document for
the mount and for the host, absent (404) without an issuer, and the 401 / 403 WWW-Authenticate
challenges with the identity reason codes in the JSON-RPC error."""

from __future__ import annotations

import json
from typing import Any

import pytest
from mcp.shared.auth import ProtectedResourceMetadata

from apps.agents.services import workflow_fixtures_seed
from apps.oauth.models import TrustedIssuer
from apps.oauth.services import issuer_add
from apps.tenants.models import Tenant
from tests.door_client import DoorClient
from tests.mcp.conftest import routing_headers, rpc
from tests.oauth.auth_server import AuthServer

pytestmark = pytest.mark.django_db

PRM = "/.well-known/oauth-protected-resource"


def trust(auth: AuthServer, tenant: Tenant | None, **fields: Any) -> TrustedIssuer:
    """Trust `auth` (its metadata and keys fetched through the egress guard), mapped to `tenant`,
    re-checking tokens by introspection unless the test says otherwise."""
    client_id, secret = auth.introspection_client
    values: dict[str, Any] = {"issuer": auth.issuer, "tenant": tenant, "introspection_client_id": client_id}
    values.update(fields)
    return issuer_add(fields=values, introspection_client_secret=secret, actor="test")


def mcp_post(body: dict[str, Any], *, token: str | None = None, client: DoorClient | None = None) -> Any:
    headers = routing_headers(body)
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    sent = json.dumps(body)
    return (client or DoorClient()).post("/mcp", data=sent, content_type="application/json", headers=headers)


def challenge_params(header: str) -> dict[str, str]:
    """`Bearer a="x", b="y"` -> {a: x, b: y} (the values here contain no commas or quotes)."""
    assert header.startswith("Bearer "), header
    params = {}
    for part in header[len("Bearer ") :].split(", "):
        name, _, value = part.partition("=")
        params[name] = value.strip('"')
    return params


@pytest.fixture
def acme(db: Any) -> Tenant:
    tenant = Tenant.objects.get_or_create(slug="acme")[0]
    workflow_fixtures_seed(tenant=tenant)
    return tenant


def test_no_issuer_no_documents_and_the_plain_challenge(acme: Tenant, settings: Any) -> None:
    client = DoorClient()
    for path in (PRM, f"{PRM}/mcp"):
        response = client.get(path)
        assert response.status_code == 404, path
        assert response.json()["error"] == "not_found"  # the host's usual (enveloped) 404
    refused = mcp_post(rpc("tools/list"))
    assert refused.status_code == 401
    assert refused["WWW-Authenticate"] == 'Bearer realm="openwop"'  # no OAuth lane: no resource_metadata
    assert refused.json()["error"]["data"] == {"reason": "unauthenticated"}


def test_documents_for_the_mount_and_the_host(auth_server: AuthServer, acme: Tenant, settings: Any) -> None:
    base = settings.OPENWOP_PUBLIC_URL
    trust(auth_server, acme, required_scopes={"mcp:tools": ["mcp:tools"], "a2a": ["a2a", "openid"]})
    client = DoorClient()

    mount = client.get(f"{PRM}/mcp")
    assert mount.status_code == 200
    assert mount["Content-Type"] == "application/json"
    assert mount["Cache-Control"] == "public, max-age=60"
    document = mount.json()
    assert document == {
        "resource": f"{base}/mcp",
        "authorization_servers": [auth_server.issuer],
        "bearer_methods_supported": ["header"],
        "resource_name": "openwop-host MCP server",
        "scopes_supported": ["mcp:tools"],  # the mount's families only (issue 32)
    }
    ProtectedResourceMetadata.model_validate(document)  # the mcp SDK client's own model of RFC 9728

    host = client.get(PRM).json()
    # RFC 9728 §3.3: `resource` is exactly the identifier the well-known path was formed from.
    assert host["resource"] == base and host["authorization_servers"] == [auth_server.issuer]
    assert host["scopes_supported"] == ["a2a", "openid"]  # the A2A and REST doors' families
    ProtectedResourceMetadata.model_validate(host)

    assert client.get(f"{PRM}/not-a-mount").status_code == 404
    assert client.post(f"{PRM}/mcp").status_code == 405

    # A disabled issuer is not offered; with none left the documents go away.
    TrustedIssuer.objects.filter(issuer=auth_server.issuer).update(enabled=False)
    assert client.get(f"{PRM}/mcp").status_code == 404


def test_scopes_supported_omitted_when_none_required(auth_server: AuthServer, acme: Tenant) -> None:
    trust(auth_server, acme)
    document = DoorClient().get(f"{PRM}/mcp").json()
    assert "scopes_supported" not in document


def test_401_challenges_carry_the_metadata_and_the_reason(auth_server: AuthServer, acme: Tenant, settings: Any) -> None:
    trust(auth_server, acme)
    metadata_url = f"{settings.OPENWOP_PUBLIC_URL}{PRM}/mcp"
    audience = f"{settings.OPENWOP_PUBLIC_URL}/mcp"

    missing = mcp_post(rpc("tools/list"))
    assert missing.status_code == 401
    assert challenge_params(missing["WWW-Authenticate"]) == {"realm": "openwop", "resource_metadata": metadata_url}
    assert missing.json()["error"]["data"] == {"reason": "unauthenticated"}

    cases = {
        "audience_mismatch": auth_server.mint(aud="https://elsewhere.example/mcp"),
        "identity_unverified": auth_server.mint(aud=audience, iat=1_600_000_000, exp=1_600_000_300),  # expired
        "identity_unresolvable": auth_server.mint(aud=audience, sub=""),
    }
    for reason, token in cases.items():
        refused = mcp_post(rpc("tools/list"), token=token)
        assert refused.status_code == 401, (reason, refused.content)
        params = challenge_params(refused["WWW-Authenticate"])
        assert params == {"realm": "openwop", "error": "invalid_token", "resource_metadata": metadata_url}, reason
        error = refused.json()["error"]
        assert error["data"] == {"reason": reason}, error
        assert "Traceback" not in error["message"]
    # The expired token says so.
    expired = mcp_post(rpc("tools/list"), token=cases["identity_unverified"]).json()["error"]
    assert "expired" in expired["message"]

    # Revoked at the issuer: introspection refuses it (exp-and-recheck).
    revoked = auth_server.mint(aud=audience)
    auth_server.revoke(revoked)
    answer = mcp_post(rpc("tools/list"), token=revoked)
    assert answer.status_code == 401 and answer.json()["error"]["data"] == {"reason": "credential_revoked"}

    # A token addressed to the A2A door (the host's URL) is not one for the mount.
    a2a_token = auth_server.mint(aud=settings.OPENWOP_PUBLIC_URL)
    wrong_door = mcp_post(rpc("tools/list"), token=a2a_token)
    assert wrong_door.status_code == 401 and wrong_door.json()["error"]["data"] == {"reason": "audience_mismatch"}

    # exp-only: a token living longer than the window is refused with its own code.
    TrustedIssuer.objects.filter(issuer=auth_server.issuer).update(revocation="exp-only", revocation_window_seconds=60)
    long_lived = mcp_post(rpc("tools/list"), token=auth_server.mint(aud=audience, lifetime=3600))
    assert long_lived.status_code == 401
    assert long_lived.json()["error"]["data"] == {"reason": "credential_lifetime_exceeded"}


def test_scope_challenge_per_method_family(auth_server: AuthServer, acme: Tenant, settings: Any, make_key: Any) -> None:
    trust(auth_server, acme, required_scopes={"mcp:tools": ["mcp:tools", "openid"], "mcp:prompts": ["mcp:prompts"]})
    audience = f"{settings.OPENWOP_PUBLIC_URL}/mcp"
    metadata_url = f"{settings.OPENWOP_PUBLIC_URL}{PRM}/mcp"

    narrow = auth_server.mint(aud=audience, scope="mcp:tools")  # lacks openid
    refused = mcp_post(rpc("tools/list"), token=narrow)
    assert refused.status_code == 403
    assert challenge_params(refused["WWW-Authenticate"]) == {
        "realm": "openwop",
        "error": "insufficient_scope",
        "scope": "mcp:tools openid",  # every scope the operation requires
        "resource_metadata": metadata_url,
    }
    assert refused.json()["error"]["data"] == {
        "reason": "forbidden",
        "error": "insufficient_scope",
        "requiredScopes": ["mcp:tools", "openid"],
    }
    # Another family with nothing required is not refused; one with its scope present neither.
    assert mcp_post(rpc("resources/list"), token=narrow).status_code == 200
    wide = auth_server.mint(aud=audience, scope="openid mcp:tools mcp:prompts")
    listed = mcp_post(rpc("tools/list"), token=wide)
    assert listed.status_code == 200, listed.content
    assert any(t["name"] == "echo" for t in listed.json()["result"]["tools"])
    assert mcp_post(rpc("prompts/list"), token=wide).status_code == 200
    assert mcp_post(rpc("prompts/list"), token=narrow).status_code == 403
    # API keys carry no scopes: never refused by an issuer's requirements.
    key = make_key("acme")
    assert mcp_post(rpc("tools/list"), token=key).status_code == 200


def test_each_401_names_the_scopes_its_door_requires(auth_server: AuthServer, acme: Tenant, settings: Any) -> None:
    """Issue 32: the MCP authorization spec's scope selection takes the 401's `scope` first, so each
    door names what it requires (the mount: every mcp:* family; A2A: a2a; REST: rest), and each
    RFC 9728 document lists its own resource's scopes, never another's."""
    trust(auth_server, acme, required_scopes={
        "mcp:tools": ["mcp:tools"], "mcp:resources": ["mcp:resources", "openid"], "a2a": ["a2a"], "rest": ["api:read"],
    })  # fmt: skip
    base = settings.OPENWOP_PUBLIC_URL
    client = DoorClient()
    assert client.get(f"{PRM}/mcp").json()["scopes_supported"] == ["mcp:resources", "mcp:tools", "openid"]
    assert client.get(PRM).json()["scopes_supported"] == ["a2a", "api:read"]

    mcp = challenge_params(mcp_post(rpc("tools/list"))["WWW-Authenticate"])
    assert mcp == {
        "realm": "openwop", "scope": "mcp:resources mcp:tools openid", "resource_metadata": f"{base}{PRM}/mcp",
    }  # fmt: skip
    expired = auth_server.mint(aud=f"{base}/mcp", lifetime=-120)
    assert challenge_params(mcp_post(rpc("tools/list"), token=expired)["WWW-Authenticate"])["scope"] == (
        "mcp:resources mcp:tools openid"
    )
    a2a = client.post("/a2a/jsonrpc", data={"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}},
                      content_type="application/json", headers={"A2A-Version": "1.0"})  # fmt: skip
    assert a2a.status_code == 401
    assert challenge_params(a2a["WWW-Authenticate"]) == {
        "realm": "openwop", "scope": "a2a", "resource_metadata": f"{base}{PRM}",
    }  # fmt: skip
    rest = client.get("/host/openwop-host/api/whoami")
    assert rest.status_code == 401
    assert challenge_params(rest["WWW-Authenticate"]) == {
        "realm": "openwop", "scope": "api:read", "resource_metadata": f"{base}{PRM}",
    }  # fmt: skip
