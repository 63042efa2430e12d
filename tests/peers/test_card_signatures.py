"""The host as a client checks the agent cards it is given (issue 21 item 3, A2A 1.0 §Agent Card
signing) against real HTTPS a2a-sdk peers on loopback: a card signed with the a2a-sdk's signer
(its JWKS on the peer's own origin), the same card altered in one field after signing, an
unsigned card, and a card whose `jku` points at another origin, under each `cardSignaturePolicy`
of the peer credential; plus a pinned key. A refusal fails the node with a vendor code before
anything but the card fetch reaches the peer."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from a2a.types import AgentCard
from a2a.utils.signing import create_agent_card_signer
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from django.test import override_settings
from jwt.algorithms import OKPAlgorithm
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from apps.core.errors import VENDOR_STATUS
from apps.peers.models import CardSignaturePolicy
from apps.peers.services import peer_credential_create
from apps.runs.models import Run, RunStatus
from tests.envelope import assert_envelope
from tests.live import free_port
from tests.peers.conftest import Caller, events, run_node
from tests.peers.peer_apps import EchoAgent, a2a_agent_app
from tests.peers.peer_servers import Peer
from tests.peers.test_seams import A2A_SEAM

pytestmark = pytest.mark.django_db(transaction=True)

UNSIGNED = "openwop-host.peer_card_unsigned"
INVALID = "openwop-host.peer_card_signature_invalid"
JWKS_PATH = "/.well-known/jwks.json"


@dataclass
class SigningKey:
    kid: str
    private: ed25519.Ed25519PrivateKey

    @classmethod
    def generate(cls, kid: str = "peer-key-1") -> SigningKey:
        return cls(kid, ed25519.Ed25519PrivateKey.generate())

    @property
    def public_jwk(self) -> dict[str, Any]:
        return {**OKPAlgorithm.to_jwk(self.private.public_key(), as_dict=True), "kid": self.kid, "alg": "EdDSA"}

    @property
    def public_pem(self) -> str:
        return (
            self.private.public_key()
            .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
            .decode()
        )

    def signer(self, jku: str) -> Callable[[AgentCard], AgentCard]:
        pem = self.private.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        return create_agent_card_signer(pem, {"kid": self.kid, "alg": "EdDSA", "jku": jku, "typ": "JOSE"})


@dataclass
class CardPeer:
    peer: Peer
    agent: EchoAgent

    @property
    def messages_received(self) -> int:
        """What reached the peer besides the card and its JWKS: the agent's messages, any POST."""
        return len(self.agent.messages) + sum(1 for s in self.peer.seen if s.method == "POST")

    @property
    def jwks_fetches(self) -> int:
        return sum(1 for s in self.peer.seen if s.path == JWKS_PATH)


def _jwks_route(key: SigningKey) -> Route:
    return Route(JWKS_PATH, lambda request: JSONResponse({"keys": [key.public_jwk]}))


def _card_peer(serve: Callable[..., Peer], kind: str, key: SigningKey, *, jku: str | None = None) -> CardPeer:
    """A peer serving a `good`, `tampered`, `unsigned` or `foreign-jku` card (whose jku is `jku`)."""
    port = free_port()
    origin = f"https://signed-peer.test:{port}"
    agent = EchoAgent()

    def hook(card: AgentCard) -> AgentCard:
        if kind == "unsigned":
            return card
        card = key.signer(jku or origin + JWKS_PATH)(card)
        if kind == "tampered":
            card.description = "Echoes, and something else."  # one field changed after signing
        return card

    app = a2a_agent_app(origin, agent, card_hook=hook, extra_routes=[_jwks_route(key)])
    return CardPeer(serve("signed-peer.test", app, port=port), agent)


def _elsewhere(serve: Callable[..., Peer], key: SigningKey) -> Peer:
    """Another origin serving the right JWKS: a jku there must never be fetched."""
    return serve("keys-elsewhere.test", Starlette(routes=[_jwks_route(key)]))


def _credential(caller: Caller, origin: str, policy: str, pinned: object = None) -> str:
    return peer_credential_create(
        subject=caller.subject,
        url=origin + "/",
        secret="peer-secret",
        card_signature_policy=policy,
        pinned_card_key=pinned,
    ).credential_id


def _call(caller: Caller, peer: CardPeer, credential_id: str | None) -> Run:
    config: dict[str, Any] = {"url": peer.peer.origin, "text": "hi"}
    if credential_id is not None:
        config["credentialId"] = credential_id
    return run_node(caller, "a2a.call", config)


def _refused_before_sending(run: Run, peer: CardPeer, code: str) -> None:
    assert run.status == RunStatus.FAILED, run.outputs
    [node_failed] = events(run, "node.failed")
    assert node_failed.payload["error"]["code"] == run.error["code"] == code
    assert peer.messages_received == 0
    assert [s.path for s in peer.peer.seen if s.path != JWKS_PATH] == ["/.well-known/agent-card.json"]


def _completed_with_one_message(run: Run, peer: CardPeer) -> None:
    assert run.status == RunStatus.COMPLETED, run.error
    assert run.outputs["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert len(peer.agent.messages) == 1


# card kind -> policy -> None (completes) or the refusal's code
EXPECTED: dict[str, dict[str, str | None]] = {
    "good": {"require": None, "verify-if-present": None, "ignore": None},
    "tampered": {"require": INVALID, "verify-if-present": INVALID, "ignore": None},
    "unsigned": {"require": UNSIGNED, "verify-if-present": None, "ignore": None},
    "foreign-jku": {"require": INVALID, "verify-if-present": INVALID, "ignore": None},
}


@pytest.mark.parametrize("policy", CardSignaturePolicy.values)
@pytest.mark.parametrize("kind", list(EXPECTED))
def test_each_card_under_each_policy(acme: Caller, serve: Callable[..., Peer], kind: str, policy: str) -> None:
    key = SigningKey.generate()
    elsewhere = _elsewhere(serve, key) if kind == "foreign-jku" else None
    jku = f"{elsewhere.origin}{JWKS_PATH}" if elsewhere else None
    peer = _card_peer(serve, "good" if kind == "foreign-jku" else kind, key, jku=jku)
    run = _call(acme, peer, _credential(acme, peer.peer.origin, policy))

    expected = EXPECTED[kind][policy]
    if expected is None:
        _completed_with_one_message(run, peer)
    else:
        _refused_before_sending(run, peer, expected)
        assert run.error["details"]["policy"] == policy
    if elsewhere is not None:  # a jku off the card's origin is never fetched, whatever the policy
        assert elsewhere.seen == []
    if policy == "ignore":
        assert peer.jwks_fetches == 0  # nothing checked, nothing fetched
    if kind == "good" and policy != "ignore":
        assert peer.jwks_fetches == 1


def test_without_a_credential_a_bad_signature_is_refused_and_an_unsigned_card_allowed(
    acme: Caller, serve: Callable[..., Peer]
) -> None:
    key = SigningKey.generate()
    tampered = _card_peer(serve, "tampered", key)
    _refused_before_sending(_call(acme, tampered, None), tampered, INVALID)
    unsigned = _card_peer(serve, "unsigned", key)
    _completed_with_one_message(_call(acme, unsigned, None), unsigned)


def test_a_pinned_key_verifies_a_card_whose_jku_is_unreachable(acme: Caller, serve: Callable[..., Peer]) -> None:
    key = SigningKey.generate()
    gone = f"https://signed-peer.test:{free_port()}{JWKS_PATH}"  # nothing listens there
    peer = _card_peer(serve, "good", key, jku=gone)
    unpinned = _call(acme, peer, _credential(acme, peer.peer.origin, "require"))
    _refused_before_sending(unpinned, peer, INVALID)  # its key cannot be had from the card's origin
    assert unpinned.error["details"]["keySource"] == "jku"

    for pinned in (key.public_jwk, key.public_pem):
        run = _call(acme, peer, _credential(acme, peer.peer.origin, "require", pinned=pinned))
        assert run.status == RunStatus.COMPLETED, run.error
    assert len(peer.agent.messages) == 2 and peer.jwks_fetches == 0


def test_a_wrong_pinned_key_refuses_a_card_the_jku_would_verify(acme: Caller, serve: Callable[..., Peer]) -> None:
    key, other = SigningKey.generate(), SigningKey.generate()
    peer = _card_peer(serve, "good", key)
    run = _call(acme, peer, _credential(acme, peer.peer.origin, "verify-if-present", pinned=other.public_pem))
    _refused_before_sending(run, peer, INVALID)
    assert run.error["details"]["keySource"] == "pinned" and peer.jwks_fetches == 0


def test_a_verified_card_is_not_verified_again_while_it_does_not_change(
    acme: Caller, serve: Callable[..., Peer]
) -> None:
    key = SigningKey.generate()
    peer = _card_peer(serve, "good", key)
    credential = _credential(acme, peer.peer.origin, "require")
    for _ in range(3):
        assert _call(acme, peer, credential).status == RunStatus.COMPLETED
    card_fetches = sum(1 for s in peer.peer.seen if s.path == "/.well-known/agent-card.json")
    assert card_fetches == 3 and peer.jwks_fetches == 1 and len(peer.agent.messages) == 3


def test_a_card_signed_with_a_key_the_jwks_does_not_hold_is_refused(acme: Caller, serve: Callable[..., Peer]) -> None:
    key = SigningKey.generate()
    port = free_port()
    origin = f"https://signed-peer.test:{port}"
    agent = EchoAgent()
    impostor = SigningKey.generate(kid=key.kid)  # same kid, different key
    app = a2a_agent_app(origin, agent, card_hook=impostor.signer(origin + JWKS_PATH), extra_routes=[_jwks_route(key)])
    peer = CardPeer(serve("signed-peer.test", app, port=port), agent)
    _refused_before_sending(_call(acme, peer, None), peer, INVALID)


@override_settings(OPENWOP_CONFORMANCE_SEAMS=True)
def test_the_a2a_seam_refuses_a_tampered_card_with_the_vendor_code(acme: Caller, serve: Callable[..., Peer]) -> None:
    peer = _card_peer(serve, "tampered", SigningKey.generate())
    body = assert_envelope(acme.post(A2A_SEAM, {"peerUrl": peer.peer.origin}), INVALID, 502)
    assert body["details"]["runId"] and peer.messages_received == 0
    assert VENDOR_STATUS[UNSIGNED] == VENDOR_STATUS[INVALID] == 502
