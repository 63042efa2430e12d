"""Signed agent cards (issue 21; A2A 1.0 §Agent Card signing), black-box: a live uvicorn serves the
cards and `/.well-known/jwks.json`, and the a2a-sdk's own verifier (`create_signature_verifier`)
checks them with keys fetched from the served JWKS, so a signature that verifies here verifies for
any a2a-sdk client.

Keys are made by the services the admin calls, sealed under the live host's SECRET_KEY (the live
server must be able to open them)."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.client.card_resolver import parse_agent_card
from a2a.types import AgentCard, GetExtendedAgentCardRequest
from a2a.utils.signing import InvalidSignaturesError, NoSignatureError, create_signature_verifier
from asgiref.sync import sync_to_async
from django.test import override_settings
from django.utils import timezone
from jwt import PyJWK
from jwt.exceptions import PyJWKError

from apps.a2a.models import (
    CardSigningAlgorithm,
    CardSigningKey,
    CardSigningKeyAction,
    CardSigningKeyChange,
    CardSigningKeyState,
)
from apps.a2a.services import card_key_activate, card_key_generate, card_key_retire
from apps.a2a.signing import JWKS_PATH, jwks_document
from apps.agents.models import Agent
from apps.agents.routing_values import a2a_tenant_of
from apps.agents.services import DEMO_AGENT_ID
from apps.facets.services import facet_update
from apps.tenants.models import Tenant
from tests.a2a.live import CARD_PATH, db_read, repointed

ALGORITHMS = ["EdDSA", "ES256"]
MOVED = "/agents/host/signed-card.json"


@pytest.fixture
def live_secret(live_env) -> Iterator[None]:  # type: ignore[no-untyped-def]
    """Seal keys (and mint routing values) as the live host does: under its SECRET_KEY."""
    env, _ = live_env
    with override_settings(SECRET_KEY=env["DJANGO_SECRET_KEY"]):
        yield


def _key_new(algorithm: str, *, activate: bool = True) -> CardSigningKey:
    key = card_key_generate(algorithm=algorithm, actor="test")
    return card_key_activate(key_pk=key.pk, actor="test") if activate else key


async def key_new(algorithm: str, *, activate: bool = True) -> CardSigningKey:
    return await db_read(lambda: _key_new(algorithm, activate=activate))


def served_jwks(live_url: str) -> Callable[[str | None, str | None], PyJWK]:
    """The verifier's key provider: the key named `kid` in the JWKS the signature's `jku` names,
    fetched from the live server (its public origin is not the test port: same path, live origin)."""

    def provide(kid: str | None, jku: str | None) -> PyJWK:
        assert jku is not None and urlsplit(jku).path == JWKS_PATH, jku
        response = httpx.get(live_url + urlsplit(jku).path, timeout=30)
        response.raise_for_status()
        for jwk in response.json()["keys"]:
            if jwk["kid"] == kid:
                return PyJWK(jwk)
        raise PyJWKError(f"no key {kid!r} in the served JWKS")  # a PyJWTError: "invalid", not a crash

    return provide


def verifier(live_url: str) -> Callable[[AgentCard], None]:
    return create_signature_verifier(served_jwks(live_url), ALGORITHMS)


def protected_header(card: AgentCard) -> dict[str, Any]:
    [signature] = card.signatures
    encoded = signature.protected
    return json.loads(base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)))


async def fetch_card(http: httpx.AsyncClient, url: str) -> AgentCard:
    response = await http.get(url)
    response.raise_for_status()
    return parse_agent_card(response.json())


def tampered(card: AgentCard) -> AgentCard:
    altered = AgentCard()
    altered.CopyFrom(card)
    altered.description = card.description + " (edited in transit)"
    return altered


async def test_cards_go_out_unsigned_without_an_active_key(live_url: str) -> None:
    async with httpx.AsyncClient(timeout=30) as http:
        card = await http.get(f"{live_url}{CARD_PATH}")
        assert card.status_code == 200 and "signatures" not in card.json()
        with pytest.raises(NoSignatureError):
            verifier(live_url)(parse_agent_card(card.json()))
        jwks = await http.get(f"{live_url}{JWKS_PATH}")
        assert jwks.status_code == 200 and jwks.json() == {"keys": []}
        discovery = (await http.get(f"{live_url}/.well-known/openwop")).json()
        assert discovery["extensions"]["openwop-host.cardSigning"] == {"signed": False}

        # A generated key that was never activated signs nothing and is not published.
        await key_new("EdDSA", activate=False)
        assert "signatures" not in (await http.get(f"{live_url}{CARD_PATH}")).json()
        assert (await http.get(f"{live_url}{JWKS_PATH}")).json() == {"keys": []}


@pytest.mark.parametrize("algorithm", ["EdDSA", "ES256"])
async def test_public_per_agent_and_moved_cards_verify_against_the_served_jwks(
    live_url: str,
    live_secret: None,
    make_key,
    algorithm: str,  # type: ignore[no-untyped-def]
) -> None:
    api_key = await sync_to_async(make_key)("acme")  # tenant hooks seed the demo agent on commit
    key = await key_new(algorithm)
    check = verifier(live_url)

    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {api_key}"}, timeout=30) as http:
        # The public card, through the sdk's own resolver, verified as it is parsed.
        public = await A2ACardResolver(http, live_url).get_agent_card(signature_verifier=check)
        header = protected_header(public)
        assert header["kid"] == key.kid and header["alg"] == algorithm and header["typ"] == "JOSE"
        assert urlsplit(header["jku"]).path == JWKS_PATH
        with pytest.raises(InvalidSignaturesError):
            check(tampered(public))  # one field altered: no longer the card that was signed

        # The JWKS: the public half only, cacheable, with a working ETag.
        jwks = await http.get(f"{live_url}{JWKS_PATH}")
        [published] = jwks.json()["keys"]
        assert published["kid"] == key.kid and published["alg"] == algorithm and published["use"] == "sig"
        assert "d" not in published and set(published) <= {"kid", "kty", "crv", "x", "y", "alg", "use"}
        assert jwks.headers["Cache-Control"].startswith("public, max-age=")
        again = await http.get(f"{live_url}{JWKS_PATH}", headers={"If-None-Match": jwks.headers["ETag"]})
        assert again.status_code == 304

        # Discovery says the cards are signed, and by which key.
        discovery = (await http.get(f"{live_url}/.well-known/openwop")).json()
        assert discovery["extensions"]["openwop-host.cardSigning"] == {
            "signed": True, "kid": key.kid, "alg": algorithm, "jwksUrl": header["jku"],
        }  # fmt: skip

        # A per-agent card (GetExtendedAgentCard with `tenant: R`) through the sdk client.
        def routing_value() -> str:
            demo = Agent.objects.for_tenant(Tenant.objects.get(slug="acme")).get(agent_id=DEMO_AGENT_ID)
            return a2a_tenant_of(agent=demo)

        r = await db_read(routing_value)
        config = ClientConfig(streaming=False, supported_protocol_bindings=["HTTP+JSON"], httpx_client=http)
        client = ClientFactory(config).create(repointed(public, live_url))
        agent = await client.get_extended_agent_card(GetExtendedAgentCardRequest(tenant=r), signature_verifier=check)
        assert {i.tenant for i in agent.supported_interfaces} == {r}
        assert protected_header(agent)["kid"] == key.kid
        with pytest.raises(InvalidSignaturesError):
            check(tampered(agent))
        # The same card over JSON-RPC, and the host card (no tenant), verify too.
        config = ClientConfig(streaming=False, supported_protocol_bindings=["JSONRPC"], httpx_client=http)
        rpc = ClientFactory(config).create(repointed(public, live_url))
        await rpc.get_extended_agent_card(GetExtendedAgentCardRequest(tenant=r), signature_verifier=check)
        host = await rpc.get_extended_agent_card(GetExtendedAgentCardRequest(), signature_verifier=check)
        assert host.name == public.name

        # The card at a moved agent_card_path is signed as well.
        await db_read(lambda: facet_update(protocol="a2a", changes={"agent_card_path": MOVED}, actor="test"))
        moved = await A2ACardResolver(http, live_url, agent_card_path=MOVED).get_agent_card(signature_verifier=check)
        assert protected_header(moved)["kid"] == key.kid


async def test_rotation_keeps_old_cards_verifiable_for_the_grace_window_only(live_url: str, live_secret: None) -> None:
    check = verifier(live_url)
    async with httpx.AsyncClient(timeout=30) as http:
        old_key = await key_new("EdDSA")
        old = await fetch_card(http, f"{live_url}{CARD_PATH}")
        check(old)

        new_key = await key_new("ES256")  # activating it retires the old key
        new = await fetch_card(http, f"{live_url}{CARD_PATH}")
        assert protected_header(old)["kid"] == old_key.kid and protected_header(new)["kid"] == new_key.kid
        kids = {k["kid"] for k in (await http.get(f"{live_url}{JWKS_PATH}")).json()["keys"]}
        assert kids == {old_key.kid, new_key.kid}
        check(old)  # signed before the rotation, still verifies inside the grace window
        check(new)

        # The old key's retirement moved back past the grace window (7 days on the live host).
        def age_retirement() -> None:
            CardSigningKey.objects.filter(pk=old_key.pk).update(retired_at=timezone.now() - timedelta(days=8))

        await db_read(age_retirement)
        kids = {k["kid"] for k in (await http.get(f"{live_url}{JWKS_PATH}")).json()["keys"]}
        assert kids == {new_key.kid}
        with pytest.raises(InvalidSignaturesError):
            check(old)
        check(new)

        # Retiring the active key with no successor: cards go out unsigned, the key stays
        # published for its grace window.
        await db_read(lambda: card_key_retire(key_pk=new_key.pk, actor="test"))
        assert "signatures" not in (await http.get(f"{live_url}{CARD_PATH}")).json()
        check(new)

    def audit() -> dict[str, list[str]]:
        rows = CardSigningKeyChange.objects.order_by("at", "id")
        return {kid: [r.action for r in rows if r.kid == kid] for kid in (old_key.kid, new_key.kid)}

    lifecycle = [CardSigningKeyAction.GENERATE, CardSigningKeyAction.ACTIVATE, CardSigningKeyAction.RETIRE]
    assert await db_read(audit) == {old_key.kid: lifecycle, new_key.kid: lifecycle}
    states = await db_read(lambda: set(CardSigningKey.objects.values_list("state", flat=True)))
    assert states == {CardSigningKeyState.RETIRED}


def test_grace_window_follows_the_setting(db) -> None:  # type: ignore[no-untyped-def]
    """In-process: the JWKS drops a retired key once `OPENWOP_CARD_KEY_GRACE_SECONDS` passed."""
    first = _key_new(CardSigningAlgorithm.EDDSA)
    second = _key_new(CardSigningAlgorithm.ES256)
    retired_at = CardSigningKey.objects.get(pk=first.pk).retired_at
    assert retired_at is not None

    def kids(*, seconds_after_retirement: float) -> set[str]:
        body, _ = jwks_document(now=retired_at + timedelta(seconds=seconds_after_retirement))
        return {k["kid"] for k in json.loads(body)["keys"]}

    with override_settings(OPENWOP_CARD_KEY_GRACE_SECONDS=60):
        assert kids(seconds_after_retirement=30) == {first.kid, second.kid}
        assert kids(seconds_after_retirement=61) == {second.kid}
    assert kids(seconds_after_retirement=6 * 24 * 3600) == {first.kid, second.kid}  # default: 7 days
    assert kids(seconds_after_retirement=8 * 24 * 3600) == {second.kid}
