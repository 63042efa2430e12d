"""apps/oauth/verify.py against a real authorization server on loopback over TLS (auth_server.py):
the host fetches its metadata and keys through the egress guard, verifies the tokens it signs and
introspects them. Each refusal answers the identity chapter's code (identity.md §2.1, §6)."""

from __future__ import annotations

import base64
import json
import logging
import time
from collections.abc import Iterator
from typing import Any

import jwt
import pytest
from django.conf import settings as django_settings

from apps.core.errors import (
    AudienceMismatch,
    CredentialLifetimeExceeded,
    CredentialRevoked,
    IdentityUnresolvable,
    IdentityUnverified,
    Unauthenticated,
)
from apps.oauth.models import TrustedIssuer
from apps.oauth.selectors import door_audience, protected_resource_metadata_url
from apps.oauth.services import issuer_add, issuer_update
from apps.oauth.verify import oauth_caches_clear, subject_from_jwt
from apps.tenants.models import Tenant
from apps.tenants.selectors import subject_from_authorization, subject_from_authorization_cached
from apps.tenants.services import tenant_get_or_create
from tests.oauth.auth_server import AuthServer

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_caches() -> Iterator[None]:
    oauth_caches_clear()
    yield
    oauth_caches_clear()


def trust(auth: AuthServer, tenant: Tenant | None, **fields: Any) -> TrustedIssuer:
    """The authorization server as a trusted issuer of `tenant` (exp-and-recheck, introspecting)."""
    client_id, secret = auth.introspection_client
    values: dict[str, Any] = {"issuer": auth.issuer, "tenant": tenant, "introspection_client_id": client_id}
    values.update(fields)
    return issuer_add(fields=values, introspection_client_secret=secret, actor="test")


def rest_aud() -> str:
    return door_audience("rest")


def test_a_good_token_is_a_subject_of_the_issuer(auth_server: AuthServer, tenant: Tenant) -> None:
    trust(auth_server, tenant)
    token = auth_server.mint(sub="alice", aud=rest_aud(), scope="rest a2a")
    subject = subject_from_jwt(token, door="rest")
    assert (subject.issuer, subject.subject_id, subject.tenant, subject.lane, subject.kind) == (
        auth_server.issuer, "alice", "acme", "oidc", "user",
    )  # fmt: skip
    assert subject.tenant_pk == tenant.pk
    assert subject.scopes == frozenset({"rest", "a2a"})
    assert subject.as_wire() == {
        "issuer": auth_server.issuer, "subjectId": "alice", "tenant": "acme", "lane": "oidc", "kind": "user",
    }  # fmt: skip
    # The metadata and keys came over TLS through the egress guard; the token was introspected.
    assert ("GET", "/.well-known/openid-configuration") in auth_server.requests
    assert ("GET", "/jwks") in auth_server.requests
    assert ("POST", "/introspect") in auth_server.requests


def test_es256_and_scp_list_and_the_oauth2_lane(auth_server: AuthServer, tenant: Tenant) -> None:
    trust(auth_server, tenant, lane="oauth2")
    assert ("GET", "/.well-known/oauth-authorization-server") in auth_server.requests  # RFC 8414
    subject = subject_from_jwt(auth_server.mint(aud=rest_aud(), alg="ES256", scp=["mcp:tools"]), door="rest")
    assert subject.lane == "oauth2" and subject.scopes == frozenset({"mcp:tools"})


def test_the_bearer_routes_by_shape_and_api_keys_keep_working(
    auth_server: AuthServer, tenant: Tenant, make_key: Any
) -> None:
    trust(auth_server, tenant)
    token = auth_server.mint(aud=rest_aud())
    assert subject_from_authorization(f"Bearer {token}", door="rest").lane == "oidc"
    assert subject_from_authorization_cached(f"Bearer {token}", door="rest").subject_id == "alice"
    assert subject_from_authorization(f"Bearer {make_key('acme')}").lane == "api-key"
    with pytest.raises(Unauthenticated) as caught:
        subject_from_authorization("Bearer not-a-key-nor-a-token")
    assert caught.value.code == "unauthenticated"
    with pytest.raises(Unauthenticated, match="api key or access token"):
        subject_from_authorization(None)


def test_the_door_names_the_audience(auth_server: AuthServer, tenant: Tenant) -> None:
    trust(auth_server, tenant)
    mcp_aud = door_audience("mcp")
    assert mcp_aud == f"{django_settings.OPENWOP_PUBLIC_URL}/mcp"
    assert protected_resource_metadata_url() == (
        f"{django_settings.OPENWOP_PUBLIC_URL}/.well-known/oauth-protected-resource/mcp"
    )
    token = auth_server.mint(aud=mcp_aud)
    assert subject_from_jwt(token, door="mcp").subject_id == "alice"
    with pytest.raises(AudienceMismatch):
        subject_from_jwt(token, door="rest")
    assert subject_from_jwt(token, door=None).subject_id == "alice"  # no door named: any door's audience


def test_a_configured_audience_replaces_the_doors(auth_server: AuthServer, tenant: Tenant) -> None:
    trust(auth_server, tenant, audience="api://openwop")
    assert subject_from_jwt(auth_server.mint(aud=["other", "api://openwop"]), door="rest").tenant == "acme"
    with pytest.raises(AudienceMismatch):
        subject_from_jwt(auth_server.mint(aud=rest_aud()), door="rest")


@pytest.mark.parametrize(
    ("claims", "error", "words"),
    [
        ({"aud": "https://elsewhere.example/"}, AudienceMismatch, "not addressed"),
        ({"aud": None}, AudienceMismatch, "no audience"),
        ({"exp": int(time.time()) - 3600, "iat": int(time.time()) - 7200}, IdentityUnverified, "expired"),
        ({"nbf": int(time.time()) + 3600}, IdentityUnverified, "not yet valid (nbf)"),
        ({"iat": int(time.time()) + 3600}, IdentityUnverified, "issued in the future (iat)"),
        ({"exp": None}, IdentityUnverified, "no `exp`"),
        ({"iss": "https://127.0.0.2:1"}, IdentityUnverified, "not trusted"),
        ({"kid": "published-nowhere"}, IdentityUnverified, "does not publish"),
    ],
)
def test_each_refusal_has_its_code(
    auth_server: AuthServer, tenant: Tenant, claims: dict[str, Any], error: type[Exception], words: str
) -> None:
    trust(auth_server, tenant)
    claims = {"aud": rest_aud(), **claims}
    with pytest.raises(error, match=words.replace("(", r"\(").replace(")", r"\)")) as caught:
        subject_from_jwt(auth_server.mint(**claims), door="rest")
    assert caught.value.status == 401  # type: ignore[attr-defined]


def _resigned(token: str, **changes: Any) -> str:
    """The token with its payload changed and the original signature kept (a forgery)."""
    header, payload, signature = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims.update(changes)
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")
    return f"{header}.{forged}.{signature}"


def test_bad_signatures_and_algorithms_are_refused(auth_server: AuthServer, tenant: Tenant) -> None:
    trust(auth_server, tenant)
    good = auth_server.mint(aud=rest_aud())
    with pytest.raises(IdentityUnverified, match="signature does not verify"):
        subject_from_jwt(_resigned(good, sub="mallory"), door="rest")
    now = int(time.time())
    claims = {"iss": auth_server.issuer, "sub": "alice", "aud": rest_aud(), "iat": now, "exp": now + 60}
    unsigned = jwt.encode(claims, None, algorithm="none")  # type: ignore[arg-type]
    with pytest.raises(IdentityUnverified, match="algorithm is not accepted"):
        subject_from_jwt(unsigned, door="rest")
    # HS256 keyed with a published key's bytes: the classic confusion, refused by algorithm.
    hs = jwt.encode(claims, "public-key-bytes-as-a-shared-secret", algorithm="HS256")
    with pytest.raises(IdentityUnverified, match="algorithm is not accepted"):
        subject_from_jwt(hs, door="rest")


def test_algorithms_are_the_issuers(auth_server: AuthServer, tenant: Tenant) -> None:
    trust(auth_server, tenant, algorithms=["ES256"])
    assert subject_from_jwt(auth_server.mint(aud=rest_aud(), alg="ES256"), door="rest")
    with pytest.raises(IdentityUnverified, match="algorithm is not accepted"):
        subject_from_jwt(auth_server.mint(aud=rest_aud(), alg="RS256"), door="rest")


def test_a_disabled_issuer_is_not_trusted(auth_server: AuthServer, tenant: Tenant) -> None:
    trust(auth_server, tenant)
    issuer_update(issuer=auth_server.issuer, changes={"enabled": False}, actor="test")
    with pytest.raises(IdentityUnverified, match="not trusted"):
        subject_from_jwt(auth_server.mint(aud=rest_aud()), door="rest")


def test_the_tenant_claim_names_only_allowed_tenants(auth_server: AuthServer, tenant: Tenant) -> None:
    globex = tenant_get_or_create(slug="globex")[0]
    tenant_get_or_create(slug="initech")
    trust(auth_server, None, tenant_claim="org", allowed_tenants=[tenant, globex])
    assert subject_from_jwt(auth_server.mint(aud=rest_aud(), org="globex"), door="rest").tenant == "globex"
    assert subject_from_jwt(auth_server.mint(aud=rest_aud(), org="acme"), door="rest").tenant_pk == tenant.pk
    for org in ("initech", "nosuch", None, ["acme"]):
        with pytest.raises(IdentityUnresolvable, match="does not name a tenant"):
            subject_from_jwt(auth_server.mint(aud=rest_aud(), org=org), door="rest")


def test_subject_and_kind_claims(auth_server: AuthServer, tenant: Tenant) -> None:
    trust(auth_server, tenant, subject_claim="client_id", kind_claim="kind")
    subject = subject_from_jwt(auth_server.mint(aud=rest_aud(), client_id="bot-7", kind="agent"), door="rest")
    assert (subject.subject_id, subject.kind) == ("bot-7", "agent")
    with pytest.raises(IdentityUnresolvable, match="neither user nor agent"):
        subject_from_jwt(auth_server.mint(aud=rest_aud(), client_id="bot-7", kind="robot"), door="rest")
    with pytest.raises(IdentityUnresolvable, match="to identify its subject"):
        subject_from_jwt(auth_server.mint(aud=rest_aud(), kind="user"), door="rest")


def test_exp_only_enforces_both_lifetime_bounds(auth_server: AuthServer, tenant: Tenant) -> None:
    trust(auth_server, tenant, revocation="exp-only", revocation_window_seconds=600)
    now = int(time.time())
    ok = auth_server.mint(aud=rest_aud(), iat=now - 10, exp=now + 500)
    assert subject_from_jwt(ok, door="rest").subject_id == "alice"
    assert ("POST", "/introspect") not in auth_server.requests  # exp-only never re-checks
    # exp - iat too long, though little of it remains: the ten-year token minted ten years ago.
    with pytest.raises(CredentialLifetimeExceeded, match="exp - iat"):
        subject_from_jwt(auth_server.mint(aud=rest_aud(), iat=now - 1000, exp=now + 100), door="rest")
    # exp - now too long with exp - iat within the bound (iat slightly ahead, inside the leeway).
    with pytest.raises(CredentialLifetimeExceeded, match="remaining lifetime"):
        subject_from_jwt(auth_server.mint(aud=rest_aud(), iat=now + 30, exp=now + 630), door="rest")
    with pytest.raises(CredentialLifetimeExceeded, match="no `iat`"):
        subject_from_jwt(auth_server.mint(aud=rest_aud(), iat=None, exp=now + 60), door="rest")


def test_a_revoked_token_is_refused_within_the_window(auth_server: AuthServer, tenant: Tenant) -> None:
    trust(auth_server, tenant, revocation_window_seconds=1)
    token = auth_server.mint(aud=rest_aud())
    assert subject_from_jwt(token, door="rest").subject_id == "alice"
    assert subject_from_jwt(token, door="rest").subject_id == "alice"  # the answer is reused in the window
    assert auth_server.requests.count(("POST", "/introspect")) == 1
    auth_server.revoke(token)
    time.sleep(1.1)  # the window: the last moment a revoked token may still be accepted
    with pytest.raises(CredentialRevoked):
        subject_from_jwt(token, door="rest")
    assert auth_server.requests.count(("POST", "/introspect")) == 2


def test_an_introspection_failure_refuses_the_token(auth_server: AuthServer, tenant: Tenant) -> None:
    client_id, _ = auth_server.introspection_client
    issuer_add(
        fields={"issuer": auth_server.issuer, "tenant": tenant, "introspection_client_id": client_id},
        introspection_client_secret="the-wrong-secret", actor="test",
    )  # fmt: skip
    with pytest.raises(IdentityUnverified, match="could not be re-checked"):
        subject_from_jwt(auth_server.mint(aud=rest_aud()), door="rest")


def test_a_rotated_key_is_fetched_once_and_a_flood_of_bad_kids_is_not(
    auth_server: AuthServer, tenant: Tenant, settings: Any
) -> None:
    settings.OPENWOP_OAUTH_KEY_REFRESH_MIN_SECONDS = 3600
    trust(auth_server, tenant)
    assert auth_server.requests.count(("GET", "/jwks")) == 1
    auth_server.rotate()
    assert subject_from_jwt(auth_server.mint(aud=rest_aud()), door="rest").subject_id == "alice"
    assert auth_server.requests.count(("GET", "/jwks")) == 2  # the unknown kid re-fetched the keys
    for n in range(5):
        with pytest.raises(IdentityUnverified, match="does not publish"):
            subject_from_jwt(auth_server.mint(aud=rest_aud(), kid=f"stray-{n}"), door="rest")
    assert auth_server.requests.count(("GET", "/jwks")) == 2  # at most once per interval per issuer
    stored = TrustedIssuer.objects.get(issuer=auth_server.issuer)
    assert len(stored.jwks["keys"]) == 3  # the refreshed set is kept on the row


def test_stale_keys_are_refreshed_and_an_unreachable_issuer_fails_closed(
    auth_server: AuthServer, tenant: Tenant, settings: Any
) -> None:
    trust(auth_server, tenant)
    settings.OPENWOP_OAUTH_METADATA_MAX_AGE_SECONDS = 0
    settings.OPENWOP_OAUTH_KEY_REFRESH_MIN_SECONDS = 0
    assert subject_from_jwt(auth_server.mint(aud=rest_aud()), door="rest")
    assert auth_server.requests.count(("GET", "/jwks")) == 2
    settings.OPENWOP_EGRESS_ALLOW_CIDRS = []  # the guard now refuses loopback: nothing can be fetched
    with pytest.raises(IdentityUnverified, match="could not be refreshed"):
        subject_from_jwt(auth_server.mint(aud=rest_aud()), door="rest")


def test_no_token_reaches_a_log(auth_server: AuthServer, tenant: Tenant, caplog: pytest.LogCaptureFixture) -> None:
    trust(auth_server, tenant)
    caplog.set_level(logging.DEBUG)
    tokens = [
        auth_server.mint(aud=rest_aud(), kid="stray"),  # unknown kid: a refresh, then a refusal
        auth_server.mint(aud="x"),  # audience
        auth_server.mint(aud=rest_aud(), exp=int(time.time()) - 600, iat=int(time.time()) - 900),  # expired
        auth_server.mint(aud=rest_aud()),  # revoked: introspection
    ]
    auth_server.revoke(tokens[3])
    codes = []
    for token in tokens:
        with pytest.raises(Unauthenticated) as refused:
            subject_from_jwt(token, door="rest")
        codes.append(refused.value.code)
    assert codes == ["identity_unverified", "audience_mismatch", "identity_unverified", "credential_revoked"]
    text = caplog.text
    assert auth_server.issuer in text  # the issuer is logged ...
    for token in tokens:
        assert token not in text and token.split(".")[2] not in text  # ... never a token


@pytest.mark.django_db(transaction=True)
def test_the_verified_subject_is_cached_until_the_issuer_changes(auth_server: AuthServer) -> None:
    """Committed data, the invalidation listener running: the Subject is reused (no second
    verification) until a write to the issuer drops it in this process (and, by the table's
    trigger, in every other)."""
    from asgiref.sync import async_to_sync

    from apps.core.invalidation import cache_listening, wait_for
    from apps.oauth.verify import verified_subject_cached
    from apps.tenants.selectors import asubject_from_authorization_cached

    tenant = tenant_get_or_create(slug="acme")[0]
    trust(auth_server, tenant)
    token = auth_server.mint(aud=rest_aud())
    subject_from_jwt(token, door="rest")  # starts the listener
    assert wait_for(cache_listening, timeout=10)
    first = subject_from_jwt(token, door="rest")
    assert verified_subject_cached(token, "rest") == first
    assert verified_subject_cached(token, "mcp") is None  # per door: another audience
    assert async_to_sync(asubject_from_authorization_cached)(f"Bearer {token}", door="rest") == first
    introspections = auth_server.requests.count(("POST", "/introspect"))
    assert subject_from_jwt(token, door="rest") == first
    assert auth_server.requests.count(("POST", "/introspect")) == introspections
    issuer_update(issuer=auth_server.issuer, changes={"enabled": False}, actor="test")
    assert verified_subject_cached(token, "rest") is None
    with pytest.raises(IdentityUnverified, match="not trusted"):
        async_to_sync(asubject_from_authorization_cached)(f"Bearer {token}", door="rest")
