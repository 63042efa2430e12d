"""The A2A doors and the OAuth lanes (issue 25): the card's OAuth2 / OpenID Connect security
schemes (validated by parsing into a2a-sdk's own AgentCard, unknown fields refused), the `a2a`
scope family (403 with the scope challenge), and the a2a-sdk client calling SendMessage and
GetTask on a live host with an access token from the lead's authorization server."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
import trustme
from a2a.types import AgentCard, GetTaskRequest, ListTasksRequest, TaskState, a2a_pb2_grpc
from a2a.utils.errors import TaskNotFoundError
from google.protobuf import json_format

from apps.agents.services import workflow_fixtures_seed
from apps.oauth.models import TrustedIssuer
from apps.tenants.models import Tenant
from tests.a2a.live import CARD_PATH, Session, db_read, live_card, only_task, user_message
from tests.door_client import DoorClient
from tests.live import start_grpc, start_web
from tests.oauth.auth_server import AuthServer
from tests.oauth.test_protected_resource_metadata import challenge_params, trust


def _card(client: DoorClient | None = None) -> dict[str, Any]:
    response = (client or DoorClient()).get(CARD_PATH)
    assert response.status_code == 200
    document = response.json()
    json_format.ParseDict(document, AgentCard())  # a2a-sdk's card type; an unknown field fails here
    return document


def _scheme_name(lane: str, issuer: str) -> str:
    return f"{lane}-{hashlib.sha256(issuer.encode()).hexdigest()[:10]}"


# ---------------------------------------------------------------------------------------------
# The card (in-process)


@pytest.mark.django_db
def test_card_lists_a_scheme_per_issuer(
    auth_server: AuthServer, oauth_ca: trustme.CA, tmp_path: Path, settings: Any, caplog: Any
) -> None:
    acme = Tenant.objects.get_or_create(slug="acme")[0]
    before = _card()
    assert set(before["securitySchemes"]) == {"bearer"}
    assert before["securityRequirements"] == [{"schemes": {"bearer": {}}}]  # an empty list is no field

    trust(auth_server, acme, required_scopes={"a2a": ["a2a", "openid"], "mcp:tools": ["mcp:tools"]})
    with AuthServer(ca=oauth_ca, tmp=tmp_path) as second:
        trust(second, acme, lane="oauth2", required_scopes={"a2a": ["a2a"]})
        card = _card()
    oidc, oauth2 = _scheme_name("oidc", auth_server.issuer), _scheme_name("oauth2", second.issuer)
    schemes = card["securitySchemes"]
    assert set(schemes) == {"bearer", oidc, oauth2}
    assert schemes[oidc]["openIdConnectSecurityScheme"]["openIdConnectUrl"] == (
        auth_server.issuer + "/.well-known/openid-configuration"
    )
    assert settings.OPENWOP_PUBLIC_URL in schemes[oidc]["openIdConnectSecurityScheme"]["description"]
    flow = schemes[oauth2]["oauth2SecurityScheme"]["flows"]["authorizationCode"]
    assert flow == {
        "authorizationUrl": second.issuer + "/authorize",
        "tokenUrl": second.issuer + "/token",
        "pkceRequired": True,
        "scopes": {"a2a": "Required for a2a"},
    }
    assert schemes[oauth2]["oauth2SecurityScheme"]["oauth2MetadataUrl"] == (
        second.issuer + "/.well-known/oauth-authorization-server"
    )
    # Each scheme an alternative; an issuer's requirement lists what its tokens need on this door.
    requirements = card["securityRequirements"]
    assert requirements[0] == {"schemes": {"bearer": {}}}
    alternatives = {name: value for r in requirements[1:] for name, value in r["schemes"].items()}
    assert len(requirements) == 3 and alternatives == {oidc: {"list": ["a2a", "openid"]}, oauth2: {"list": ["a2a"]}}

    # An oauth2 issuer whose metadata names no authorization endpoint is left out, with a log line.
    TrustedIssuer.objects.filter(issuer=second.issuer).update(metadata={"issuer": second.issuer})
    with caplog.at_level(logging.WARNING, logger="apps.a2a.card"):
        assert set(_card()["securitySchemes"]) == {"bearer", oidc}
    assert second.issuer in caplog.text and "left out" in caplog.text
    # A disabled issuer leaves the card.
    TrustedIssuer.objects.filter(issuer=auth_server.issuer).update(enabled=False)
    assert set(_card()["securitySchemes"]) == {"bearer"}


@pytest.mark.django_db
def test_a2a_scope_family_in_process(auth_server: AuthServer, settings: Any, make_key: Any) -> None:
    """JSON-RPC and HTTP+JSON: an access token lacking the issuer's `a2a` scopes is a 403 with the
    scope challenge pointing at the host's resource metadata; with them it is served."""
    make_key("acme")
    acme = Tenant.objects.get(slug="acme")
    workflow_fixtures_seed(tenant=acme)
    trust(auth_server, acme, required_scopes={"a2a": ["a2a"]})
    base = settings.OPENWOP_PUBLIC_URL
    narrow = auth_server.mint(aud=base, scope="openid")
    wide = auth_server.mint(aud=base, scope="a2a")
    body = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}
    client = DoorClient()

    def rpc(token: str) -> Any:
        return client.post("/a2a/jsonrpc", data=json.dumps(body), content_type="application/json",
                           headers={"Authorization": f"Bearer {token}", "A2A-Version": "1.0"})  # fmt: skip

    refused = rpc(narrow)
    assert refused.status_code == 403
    params = challenge_params(refused["WWW-Authenticate"])
    assert params == {
        "realm": "openwop",
        "error": "insufficient_scope",
        "scope": "a2a",
        "resource_metadata": f"{base}/.well-known/oauth-protected-resource",
    }
    [info] = refused.json()["error"]["data"]
    assert info["reason"] == "INSUFFICIENT_SCOPE" and info["metadata"] == {"requiredScopes": "a2a"}
    assert rpc(wide).status_code == 200, rpc(wide).content

    rest = client.get("/a2a/rest/tasks", headers={"Authorization": f"Bearer {narrow}", "A2A-Version": "1.0"})
    assert rest.status_code == 403
    assert rest.json()["error"]["status"] == "PERMISSION_DENIED"
    assert challenge_params(rest["WWW-Authenticate"])["error"] == "insufficient_scope"
    # API keys are never held to an issuer's scopes.
    key = make_key("acme")
    assert rpc(key).status_code == 200


# ---------------------------------------------------------------------------------------------
# Live: the a2a-sdk client with an access token


@pytest.fixture(scope="module")
def oauth_host(live_env: Any, oauth_ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    env, var_dir = live_env
    bundle = tmp_path_factory.mktemp("oauth-a2a-host") / "ca.pem"
    oauth_ca.cert_pem.write_to_path(str(bundle))
    own_env = {**env, "OPENWOP_EGRESS_ALLOW_CIDRS": "127.0.0.0/8", "OPENWOP_EGRESS_CA_BUNDLE": str(bundle)}
    live, base_url = start_web(own_env, var_dir, own_public_url=True)
    yield base_url
    live.stop()


@pytest.fixture
def tenants(oauth_host: str, live_worker: Any, live_env: Any, make_key: Any, settings: Any) -> dict[str, Tenant]:
    settings.SECRET_KEY = live_env[0]["DJANGO_SECRET_KEY"]  # seal the introspection secret for the live host
    make_key("acme")
    make_key("globex")
    return {slug: Tenant.objects.get(slug=slug) for slug in ("acme", "globex")}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])
async def test_sdk_client_with_an_access_token(
    oauth_host: str, auth_server: AuthServer, tenants: dict[str, Tenant], binding: str
) -> None:
    assert "bearer" in (await live_card(oauth_host)).security_schemes
    await db_read(lambda: trust(
        auth_server, None, tenant_claim="org", allowed_tenants=list(tenants.values()), required_scopes={"a2a": ["a2a"]}
    ))  # fmt: skip
    # The card changed with the issuer (its cache dropped in the live process: TOPIC_CARD).
    card = await live_card(oauth_host)
    scheme = _scheme_name("oidc", auth_server.issuer)
    assert card.security_schemes[scheme].open_id_connect_security_scheme.open_id_connect_url == (
        auth_server.issuer + "/.well-known/openid-configuration"
    )
    acme_token = auth_server.mint(aud=oauth_host, org="acme", scope="a2a")
    globex_token = auth_server.mint(aud=oauth_host, org="globex", scope="a2a")
    acme, globex = Session(card, binding, acme_token), Session(card, binding, globex_token)
    try:
        task = await only_task(acme.client(), user_message(prefix="oauth", data={"greeting": "hi"}, skill="echo"))
        assert task.status.state == TaskState.TASK_STATE_COMPLETED and task.id.startswith("acme/")
        fetched = await acme.client().get_task(GetTaskRequest(id=task.id))
        assert fetched.id == task.id and fetched.status.state == TaskState.TASK_STATE_COMPLETED
        # Cross-tenant: globex's token does not see acme's task (the not-found every unknown id gets).
        with pytest.raises(TaskNotFoundError) as foreign:
            await globex.client().get_task(GetTaskRequest(id=task.id))
        with pytest.raises(TaskNotFoundError) as unknown:
            await globex.client().get_task(GetTaskRequest(id="globex/00000000-0000-0000-0000-000000000000"))
        assert foreign.value.message == unknown.value.message
    finally:
        await acme.close()
        await globex.close()


@pytest.mark.django_db(transaction=True)
def test_raw_refusals_on_the_live_host(oauth_host: str, auth_server: AuthServer, tenants: dict[str, Tenant]) -> None:
    trust(auth_server, tenants["acme"], required_scopes={"a2a": ["a2a"]})
    body = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}

    def post(token: str) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}", "A2A-Version": "1.0"}
        return httpx.post(f"{oauth_host}/a2a/jsonrpc", json=body, headers=headers, timeout=30)

    narrow = post(auth_server.mint(aud=oauth_host, scope="openid"))
    assert narrow.status_code == 403
    params = challenge_params(narrow.headers["WWW-Authenticate"])
    assert params["scope"] == "a2a"
    assert params["resource_metadata"] == f"{oauth_host}/.well-known/oauth-protected-resource"
    # A token for the MCP mount is not one for the A2A door.
    wrong = post(auth_server.mint(aud=f"{oauth_host}/mcp", scope="a2a"))
    assert wrong.status_code == 401
    [info] = wrong.json()["error"]["data"]
    assert info["metadata"].get("openwopError") == "audience_mismatch"
    host_metadata = f"{oauth_host}/.well-known/oauth-protected-resource"
    assert challenge_params(wrong.headers["WWW-Authenticate"]) == {
        "realm": "openwop", "error": "invalid_token", "scope": "a2a", "resource_metadata": host_metadata,
    }  # fmt: skip
    missing = httpx.get(f"{oauth_host}/a2a/rest/tasks", headers={"A2A-Version": "1.0"}, timeout=30)
    assert missing.status_code == 401
    challenge = challenge_params(missing.headers["WWW-Authenticate"])
    assert challenge == {"realm": "openwop", "scope": "a2a", "resource_metadata": host_metadata}  # issue 32
    assert httpx.get(host_metadata, timeout=30).json()["resource"] == oauth_host
    assert post(auth_server.mint(aud=oauth_host, scope="a2a")).status_code == 200


# ---------------------------------------------------------------------------------------------
# gRPC: the same family, PERMISSION_DENIED


GRPC_PUBLIC_URL = "http://grpc-oauth.example"


@pytest.fixture(scope="module")
def oauth_grpc(live_env: Any, oauth_ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    env, var_dir = live_env
    bundle = tmp_path_factory.mktemp("oauth-grpc") / "ca.pem"
    oauth_ca.cert_pem.write_to_path(str(bundle))
    own_env = {
        **env, "OPENWOP_EGRESS_ALLOW_CIDRS": "127.0.0.0/8", "OPENWOP_EGRESS_CA_BUNDLE": str(bundle),
        "OPENWOP_PUBLIC_URL": GRPC_PUBLIC_URL,  # the A2A audience its tokens must carry
    }  # fmt: skip
    live, address = start_grpc(own_env, var_dir)
    yield address
    live.stop()


@pytest.mark.django_db(transaction=True)
async def test_grpc_scope_family(oauth_grpc: str, auth_server: AuthServer, tenants: dict[str, Tenant]) -> None:
    await db_read(lambda: trust(auth_server, tenants["acme"], required_scopes={"a2a": ["a2a"]}))
    async with grpc.aio.insecure_channel(oauth_grpc) as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)

        async def list_tasks(token: str) -> Any:
            metadata = (("authorization", f"Bearer {token}"), ("a2a-version", "1.0"))
            return await stub.ListTasks(ListTasksRequest(), metadata=metadata, timeout=30)

        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await list_tasks(auth_server.mint(aud=GRPC_PUBLIC_URL, scope="openid"))
        assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "a2a" in (refused.value.details() or "")
        with pytest.raises(grpc.aio.AioRpcError) as wrong_audience:
            await list_tasks(auth_server.mint(aud="https://elsewhere.example", scope="a2a"))
        assert wrong_audience.value.code() == grpc.StatusCode.UNAUTHENTICATED
        await list_tasks(auth_server.mint(aud=GRPC_PUBLIC_URL, scope="a2a"))  # served
