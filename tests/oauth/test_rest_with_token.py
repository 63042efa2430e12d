"""Black box: a live uvicorn whose egress guard reaches the loopback authorization server (its CA
trusted, in that process only). The `openwop-client` REST client signs in with an access token
instead of an API key; tenants stay isolated; refusals carry the identity chapter's code on REST,
A2A JSON-RPC and A2A HTTP+JSON (and, rendered in process, gRPC)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme
from openwop_client import OpenwopClient
from openwop_client.errors import WopError
from openwop_client.types import CreateRunRequest

from apps.core.errors import AudienceMismatch, IdentityUnverified
from apps.oauth.services import issuer_add
from apps.tenants.models import Tenant
from apps.tenants.services import tenant_get_or_create
from tests.live import start_web
from tests.oauth.auth_server import AuthServer
from tests.oauth.conftest import live_oauth_env

AUDIENCE = "api://openwop-live"  # configured on the issuer: the same for every door of the live host


@pytest.fixture(scope="module")
def module_auth(oauth_ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthServer]:
    with AuthServer(ca=oauth_ca, tmp=tmp_path_factory.mktemp("oauth-live")) as server:
        yield server


@pytest.fixture(scope="module")
def oauth_host(live_env: Any, module_auth: AuthServer) -> Iterator[str]:
    env, var_dir = live_env
    live, base_url = start_web({**env, **live_oauth_env(module_auth)}, Path(var_dir))
    yield base_url
    live.stop()


@pytest.fixture
def trusted(transactional_db: None, module_auth: AuthServer, settings: Any, live_env: Any) -> AuthServer:
    """The issuer, trusted for acme and globex (its `org` claim names which), committed; its
    introspection secret sealed under the live host's SECRET_KEY (which opens it)."""
    settings.SECRET_KEY = live_env[0]["DJANGO_SECRET_KEY"]
    settings.OPENWOP_EGRESS_ALLOW_CIDRS = ["127.0.0.0/8"]
    settings.OPENWOP_EGRESS_CA_BUNDLE = module_auth.ca_bundle
    tenants: list[Tenant] = [tenant_get_or_create(slug=slug)[0] for slug in ("acme", "globex")]
    client_id, secret = module_auth.introspection_client
    issuer_add(
        fields={
            "issuer": module_auth.issuer, "audience": AUDIENCE, "tenant_claim": "org", "allowed_tenants": tenants,
            "introspection_client_id": client_id,
        },
        introspection_client_secret=secret, actor="test",
    )  # fmt: skip
    return module_auth


def test_a_token_creates_and_reads_a_run_and_tenants_stay_apart(oauth_host: str, trusted: AuthServer) -> None:
    alice = OpenwopClient(oauth_host, trusted.mint(sub="alice", aud=AUDIENCE, org="acme"), timeout=30)
    created = alice.runs_create(CreateRunRequest(workflowId="echo", inputs={"greeting": "hi"}))
    assert created.runId.startswith("acme/")
    snapshot = alice.runs_get(created.runId)
    assert snapshot.owner.tenant == "acme"
    assert snapshot.owner.subject.subjectId == "alice"
    assert snapshot.owner.subject.issuer == trusted.issuer and snapshot.owner.subject.lane == "oidc"

    # Same issuer, same subject name, another tenant: the run is not there for it.
    carol = OpenwopClient(oauth_host, trusted.mint(sub="alice", aud=AUDIENCE, org="globex"), timeout=30)
    with pytest.raises(WopError) as foreign:
        carol.runs_get(created.runId)
    # A foreign tenant segment: 403 id_tenant_mismatch, whether or not such a run exists (paths.py).
    assert foreign.value.status == 403
    assert foreign.value.envelope is not None and foreign.value.envelope.error == "id_tenant_mismatch"
    with pytest.raises(WopError) as unknown:
        carol.runs_get(created.runId.replace("acme/", "globex/", 1))
    assert unknown.value.status == 404
    listed = carol.runs_list(workflow_id="echo", limit=10)
    assert listed is not None and created.runId not in [r.runId for r in listed.runs]

    # A tenant the issuer may not map to is no tenant at all.
    with pytest.raises(WopError) as unresolvable:
        OpenwopClient(oauth_host, trusted.mint(aud=AUDIENCE, org="initech"), timeout=30).runs_get(created.runId)
    assert unresolvable.value.status == 401
    assert unresolvable.value.envelope is not None and unresolvable.value.envelope.error == "identity_unresolvable"


@pytest.mark.parametrize(
    ("claims", "code"),
    [
        ({"exp": int(time.time()) - 600, "iat": int(time.time()) - 900}, "identity_unverified"),
        ({"aud": "https://someone-else.example"}, "audience_mismatch"),
    ],
)
def test_a_refused_token_answers_401_with_its_code_on_rest(
    oauth_host: str, trusted: AuthServer, claims: dict[str, Any], code: str
) -> None:
    token = trusted.mint(**{"aud": AUDIENCE, "org": "acme", **claims})
    with pytest.raises(WopError) as refused:
        OpenwopClient(oauth_host, token, timeout=30).runs_list(limit=1)
    assert refused.value.status == 401
    assert refused.value.envelope is not None and refused.value.envelope.error == code
    response = httpx.get(f"{oauth_host}/runs", headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert token not in response.text


def test_a_revoked_token_is_refused_on_the_next_check(oauth_host: str, trusted: AuthServer) -> None:
    from apps.oauth.services import issuer_update

    issuer_update(issuer=trusted.issuer, changes={"revocation_window_seconds": 1}, actor="test")
    token = trusted.mint(aud=AUDIENCE, org="acme")
    client = OpenwopClient(oauth_host, token, timeout=30)
    assert client.runs_list(limit=1) is not None
    trusted.revoke(token)
    time.sleep(1.2)  # past the window: the live host must ask again
    with pytest.raises(WopError) as refused:
        client.runs_list(limit=1)
    assert refused.value.envelope is not None and refused.value.envelope.error == "credential_revoked"


def _error_info(details: list[dict[str, Any]]) -> dict[str, Any]:
    return next(d for d in details if d["@type"].endswith("google.rpc.ErrorInfo"))


def test_a2a_bindings_carry_the_code(oauth_host: str, trusted: AuthServer) -> None:
    expired = trusted.mint(aud=AUDIENCE, org="acme", exp=int(time.time()) - 600, iat=int(time.time()) - 900)
    headers = {"Authorization": f"Bearer {expired}", "A2A-Version": "1.0"}
    rpc = httpx.post(
        f"{oauth_host}/a2a/jsonrpc", json={"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}},
        headers=headers, timeout=30,
    )  # fmt: skip
    assert rpc.status_code == 401 and rpc.headers["WWW-Authenticate"].startswith("Bearer")
    error = rpc.json()["error"]
    info = _error_info(error["data"])
    assert info["reason"] == "UNAUTHENTICATED" and info["metadata"] == {"openwopError": "identity_unverified"}
    assert "expired" in error["message"]
    rest = httpx.get(f"{oauth_host}/a2a/rest/tasks", headers=headers, timeout=30)
    assert rest.status_code == 401
    assert _error_info(rest.json()["error"]["details"])["metadata"] == {"openwopError": "identity_unverified"}
    # A good token passes the same door.
    good = {"Authorization": f"Bearer {trusted.mint(aud=AUDIENCE, org='acme')}", "A2A-Version": "1.0"}
    assert httpx.get(f"{oauth_host}/a2a/rest/tasks", headers=good, timeout=30).status_code == 200
    # A plain unauthenticated answer keeps its one fixed form (nothing to tell apart).
    anonymous = httpx.get(f"{oauth_host}/a2a/rest/tasks", headers={"A2A-Version": "1.0"}, timeout=30)
    assert _error_info(anonymous.json()["error"]["details"])["metadata"] == {}


def test_grpc_renders_the_code_too() -> None:
    """The gRPC binding renders the same error (grpc_server.refused_for_error), so the code and
    message ride in its google.rpc.Status ErrorInfo."""
    from google.rpc import error_details_pb2, status_pb2

    from apps.a2a.errors import AuthenticationRequired
    from apps.a2a.grpc_server import refused_for_error

    for refusal, code in ((AudienceMismatch("not for us"), "audience_mismatch"), (IdentityUnverified(), None)):
        try:
            try:
                raise refusal
            except (IdentityUnverified, AudienceMismatch):
                raise AuthenticationRequired() from None
        except AuthenticationRequired as error:
            refused = refused_for_error(error)
        status = status_pb2.Status.FromString(refused.status)
        info = error_details_pb2.ErrorInfo()
        status.details[0].Unpack(info)
        assert info.reason == "UNAUTHENTICATED"
        assert dict(info.metadata) == {"openwopError": code or "identity_unverified"}
        assert refused.message == refusal.message
