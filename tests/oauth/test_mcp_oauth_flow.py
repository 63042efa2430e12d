"""Black box (issue 25): the `mcp` SDK client's own OAuth flow against a live host and the lead's
real authorization server on loopback over TLS. The client is told nothing but the mount's URL:
it gets the 401, reads the RFC 9728 document the challenge names, the authorization server's
RFC 8414 metadata, registers itself (RFC 7591), authorizes with PKCE S256 and the mount as the
RFC 8707 resource, exchanges the code and calls a tool with the token. Then the refusals as a
raw client sees them on the wire, and the cross-tenant case."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import httpx2
import pytest
import trustme
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

from apps.tenants.models import Tenant
from tests.a2a.live import db_read
from tests.live import start_web
from tests.mcp.conftest import routing_headers, rpc
from tests.oauth.auth_server import AuthServer
from tests.oauth.test_protected_resource_metadata import challenge_params, trust

pytestmark = pytest.mark.django_db(transaction=True)

REDIRECT_URI = "http://127.0.0.1:1/callback"  # never contacted: the redirect handler reads the 302


@pytest.fixture(scope="module")
def oauth_host(live_env: Any, oauth_ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A live host whose public URL is its own, reaching the test authorization servers (any port
    on loopback, their CA trusted) through its egress guard."""
    env, var_dir = live_env
    bundle = tmp_path_factory.mktemp("oauth-host") / "ca.pem"
    oauth_ca.cert_pem.write_to_path(str(bundle))
    own_env = {
        **env,
        "OPENWOP_EGRESS_ALLOW_CIDRS": "127.0.0.0/8",
        "OPENWOP_EGRESS_CA_BUNDLE": str(bundle),
        "OPENWOP_CELERY_QUEUE": env["OPENWOP_CELERY_QUEUE"],  # the session's worker runs its runs
    }
    live, base_url = start_web(own_env, var_dir, own_public_url=True)
    yield base_url
    live.stop()


class MemoryStorage:
    """The SDK's TokenStorage, in memory."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client_info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


class Browser:
    """The user agent: follows the authorization URL (the server auto-approves) and hands the
    code and state from the 302 back to the SDK, as a loopback redirect listener would."""

    def __init__(self, ca_bundle: str) -> None:
        self.ca_bundle = ca_bundle
        self.authorization_urls: list[str] = []
        self._result: AuthorizationCodeResult | None = None

    async def redirect(self, authorization_url: str) -> None:
        self.authorization_urls.append(authorization_url)
        async with httpx.AsyncClient(verify=ssl.create_default_context(cafile=self.ca_bundle), timeout=30) as http:
            response = await http.get(authorization_url)
        assert response.status_code == 302, response.text
        location = urlsplit(response.headers["Location"])
        query = {k: v[0] for k, v in parse_qs(location.query).items()}
        assert "code" in query, query
        self._result = AuthorizationCodeResult(code=query["code"], state=query.get("state"))

    async def callback(self) -> AuthorizationCodeResult:
        assert self._result is not None
        return self._result


def oauth_client(url: str, auth: AuthServer, storage: MemoryStorage, browser: Browser) -> Client:
    provider = OAuthClientProvider(
        server_url=url,
        client_metadata=OAuthClientMetadata(
            client_name="openwop-test",
            redirect_uris=[REDIRECT_URI],  # type: ignore[list-item]
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            token_endpoint_auth_method="none",
        ),
        storage=storage,
        redirect_handler=browser.redirect,
        callback_handler=browser.callback,
    )
    # Trusts the authorization server's CA (the host itself is plain http on loopback).
    http = httpx2.AsyncClient(
        auth=provider,
        verify=ssl.create_default_context(cafile=auth.ca_bundle),
        timeout=httpx2.Timeout(30, read=120),
    )
    return Client(streamable_http_client(url, http_client=http), mode="2026-07-28")


@pytest.fixture
def acme(oauth_host: str, live_worker: Any, live_env: Any, make_key: Any, settings: Any) -> Tenant:
    # The issuer's introspection secret is sealed with SECRET_KEY (apps/core/sealing.py): seal it
    # here with the live host's, which unseals it.
    settings.SECRET_KEY = live_env[0]["DJANGO_SECRET_KEY"]
    make_key("acme")  # the tenant, with the fixture workflows seeded (on commit)
    return Tenant.objects.get(slug="acme")


async def test_the_sdk_client_signs_in_and_calls_a_tool(oauth_host: str, auth_server: AuthServer, acme: Tenant) -> None:
    await db_read(lambda: trust(auth_server, acme, required_scopes={"mcp:tools": ["mcp:tools"]}))
    storage, browser = MemoryStorage(), Browser(auth_server.ca_bundle)
    url = f"{oauth_host}/mcp"

    async with oauth_client(url, auth_server, storage, browser) as client:
        names = [tool.name for tool in (await client.list_tools()).tools]
        assert "echo" in names
        echo = await client.call_tool("echo", {"greeting": "hi"})
        assert echo.is_error is False and echo.structured_content == {"greeting": "hi"}

    # What the flow did, as the authorization server saw it.
    served = [path for _, path in auth_server.requests]
    assert "/.well-known/oauth-authorization-server" in served
    assert ("POST", "/register") in auth_server.requests
    assert ("GET", "/authorize") in [(m, p) for m, p in auth_server.requests]
    assert ("POST", "/token") in auth_server.requests
    [authorization_url] = browser.authorization_urls  # one sign-in for the whole session
    query = {k: v[0] for k, v in parse_qs(urlsplit(authorization_url).query).items()}
    assert query["resource"] == url  # RFC 8707: the mount, from the resource metadata
    assert query["code_challenge_method"] == "S256"
    assert query["scope"] == "mcp:tools"  # the document's scopes_supported
    assert storage.tokens is not None and storage.client_info is not None
    # The host fetched the issuer's keys and re-checked the token (exp-and-recheck).
    assert ("POST", "/introspect") in auth_server.requests


async def test_the_sdk_client_asks_for_the_scopes_the_mount_names_and_succeeds(
    oauth_host: str, auth_server: AuthServer, acme: Tenant
) -> None:
    """Issue 32: the issuer grants only the scopes asked for. The host requires scopes per method
    family for MCP, A2A and REST; the SDK client, told nothing but the mount's URL, asks for what
    the 401 and the mount's RFC 9728 document name (the mcp:* families' scopes, nothing of the
    other doors'), gets them, and lists tools and resources with one sign-in."""
    required = {"mcp:tools": ["mcp:tools"], "mcp:resources": ["mcp:resources"], "a2a": ["a2a"], "rest": ["rest"]}
    await db_read(lambda: trust(auth_server, acme, required_scopes=required))
    url = f"{oauth_host}/mcp"
    async with httpx.AsyncClient(timeout=30) as raw:
        document = (await raw.get(f"{oauth_host}/.well-known/oauth-protected-resource/mcp")).json()
    assert document["scopes_supported"] == ["mcp:resources", "mcp:tools"]
    storage, browser = MemoryStorage(), Browser(auth_server.ca_bundle)

    async with oauth_client(url, auth_server, storage, browser) as client:
        assert "echo" in [tool.name for tool in (await client.list_tools()).tools]
        await client.list_resources()

    [authorization_url] = browser.authorization_urls
    query = {k: v[0] for k, v in parse_qs(urlsplit(authorization_url).query).items()}
    assert query["scope"].split() == ["mcp:resources", "mcp:tools"]  # the 401's `scope`, as named
    assert storage.tokens is not None and set((storage.tokens.scope or "").split()) == {"mcp:resources", "mcp:tools"}


async def test_a_narrower_token_steps_up_to_the_scope_the_403_names(
    oauth_host: str, auth_server: AuthServer, acme: Tenant
) -> None:
    """A client holding a token for resources only calls a tool: the 403 names `mcp:tools`, the SDK
    signs in again for what it had plus that (its step-up union), and the call succeeds."""
    required = {"mcp:tools": ["mcp:tools"], "mcp:resources": ["mcp:resources"]}
    await db_read(lambda: trust(auth_server, acme, required_scopes=required))
    url = f"{oauth_host}/mcp"
    storage, browser = MemoryStorage(), Browser(auth_server.ca_bundle)
    client_id, _ = auth_server.register(redirect_uris=[REDIRECT_URI])
    storage.client_info = OAuthClientInformationFull(
        client_id=client_id, redirect_uris=[REDIRECT_URI],  # type: ignore[list-item]
        grant_types=["authorization_code", "refresh_token"], response_types=["code"], token_endpoint_auth_method="none",
    )  # fmt: skip
    narrow = auth_server.mint(aud=url, scope="mcp:resources", client_id=client_id)
    storage.tokens = OAuthToken(access_token=narrow, token_type="Bearer", expires_in=300, scope="mcp:resources")

    async with oauth_client(url, auth_server, storage, browser) as client:
        echo = await client.call_tool("echo", {"greeting": "stepped up"})
        assert echo.is_error is False and echo.structured_content == {"greeting": "stepped up"}

    [authorization_url] = browser.authorization_urls  # the one step-up
    query = {k: v[0] for k, v in parse_qs(urlsplit(authorization_url).query).items()}
    assert set(query["scope"].split()) == {"mcp:resources", "mcp:tools"}
    assert storage.tokens is not None and storage.tokens.access_token != narrow


def test_refusals_on_the_wire(oauth_host: str, auth_server: AuthServer, acme: Tenant) -> None:
    trust(auth_server, acme, required_scopes={"mcp:tools": ["mcp:tools"]})
    url = f"{oauth_host}/mcp"
    metadata_url = f"{oauth_host}/.well-known/oauth-protected-resource/mcp"

    def post(method: str, token: str | None) -> httpx.Response:
        body = rpc(method)
        headers = routing_headers(body)
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        return httpx.post(url, json=body, headers=headers, timeout=30)

    none = post("tools/list", None)
    assert none.status_code == 401
    assert challenge_params(none.headers["WWW-Authenticate"]) == {
        "realm": "openwop", "scope": "mcp:tools", "resource_metadata": metadata_url,
    }  # fmt: skip
    prm = httpx.get(metadata_url, timeout=30).json()
    assert prm["resource"] == url and prm["authorization_servers"] == [auth_server.issuer]

    for reason, token in (
        ("audience_mismatch", auth_server.mint(aud=oauth_host, scope="mcp:tools")),
        ("identity_unverified", auth_server.mint(aud=url, scope="mcp:tools", lifetime=-120)),  # expired
        ("identity_unverified", auth_server.mint(aud=url, scope="mcp:tools", kid="k-unpublished")),
    ):
        refused = post("tools/list", token)
        assert refused.status_code == 401, refused.text
        params = challenge_params(refused.headers["WWW-Authenticate"])
        assert params["error"] == "invalid_token" and params["resource_metadata"] == metadata_url
        assert refused.json()["error"]["data"] == {"reason": reason}

    narrow = post("tools/list", auth_server.mint(aud=url, scope="openid"))
    assert narrow.status_code == 403
    params = challenge_params(narrow.headers["WWW-Authenticate"])
    assert (params["error"], params["scope"]) == ("insufficient_scope", "mcp:tools")
    assert post("tools/list", auth_server.mint(aud=url, scope="mcp:tools")).status_code == 200


def test_a_token_of_one_tenant_cannot_see_anothers_task(
    oauth_host: str, auth_server: AuthServer, acme: Tenant, make_key: Any
) -> None:
    """Cross-tenant: the issuer maps a tenant claim onto acme or globex; a globex token asking for
    acme's task gets the bytes an unknown task gets, apart from the id."""
    make_key("globex")
    globex = Tenant.objects.get(slug="globex")
    trust(auth_server, None, tenant_claim="org", allowed_tenants=[acme, globex])
    url = f"{oauth_host}/mcp"
    tasks = {"extensions": {"io.modelcontextprotocol/tasks": {}}}

    def post(body: dict[str, Any], token: str) -> httpx.Response:
        headers = {**routing_headers(body), "Authorization": f"Bearer {token}"}
        return httpx.post(url, json=body, headers=headers, timeout=60)

    acme_token = auth_server.mint(aud=url, org="acme")
    globex_token = auth_server.mint(aud=url, org="globex")
    started = post(
        rpc("tools/call", {"name": "conformance-delay", "arguments": {"delayMs": 60000}}, capabilities=tasks),
        acme_token,
    )
    assert started.status_code == 200, started.text
    task_id = started.json()["result"]["taskId"]
    assert post(rpc("tasks/get", {"taskId": task_id}, capabilities=tasks), acme_token).status_code == 200

    foreign = post(rpc("tasks/get", {"taskId": task_id}, id=7, capabilities=tasks), globex_token)
    unknown = post(rpc("tasks/get", {"taskId": "t-" + "0" * 30}, id=7, capabilities=tasks), globex_token)
    assert foreign.status_code == unknown.status_code
    assert foreign.content == unknown.content, (foreign.text, unknown.text)
    assert "WWW-Authenticate" not in foreign.headers  # no challenge on a not-found (auth-challenge-no-oracle)
    # A tenant the issuer may not map to is refused outright.
    stray = post(rpc("tools/list"), auth_server.mint(aud=url, org="initech"))
    assert stray.status_code == 401 and stray.json()["error"]["data"] == {"reason": "identity_unresolvable"}
    post(rpc("tasks/cancel", {"taskId": task_id}, capabilities=tasks), acme_token)


def test_no_issuer_no_metadata(oauth_host: str, acme: Tenant) -> None:
    assert httpx.get(f"{oauth_host}/.well-known/oauth-protected-resource/mcp", timeout=30).status_code == 404
    body = rpc("tools/list")
    refused = httpx.post(f"{oauth_host}/mcp", json=body, headers=routing_headers(body), timeout=30)
    assert refused.status_code == 401 and refused.headers["WWW-Authenticate"] == 'Bearer realm="openwop"'
