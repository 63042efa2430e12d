"""Agent card signing (A2A 1.0 §Agent Card signing; issue 21): key material, the signer, the JWKS.

A card is signed with the a2a-sdk's own helper (`a2a.utils.signing.create_agent_card_signer`: JWS
over the JCS-canonical card, `signatures` excluded), never a canonicalization of ours, so what a
client's a2a-sdk verifier recomputes is byte for byte what was signed. The protected header names
`kid` (the key's RFC 7638 thumbprint), `alg`, `typ: JOSE` and `jku`, the JWKS this host serves at
`/.well-known/jwks.json`.

Signing happens when a card version is built (apps/a2a/card.py), never per request: the signed
card is cached under the `card` topic, which every write to the key table empties in every
process (trigger, migration 0004). The JWKS lists the active key and every key retired less than
`OPENWOP_CARD_KEY_GRACE_SECONDS` ago (default 7 days) that once signed, so a card fetched before a
rotation still verifies during the window; the window is checked at each request, since time
passing writes no row.

Private keys are PKCS#8 PEM sealed at rest (apps/core/sealing.py, purpose CARD_SIGNING_KEYS) and
opened only to sign; nothing here logs, returns or renders them.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from a2a.types import AgentCard
from a2a.utils.signing import create_agent_card_signer
from cryptography.fernet import InvalidToken
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from django.conf import settings
from django.utils import timezone

from apps.a2a.models import CardSigningAlgorithm, CardSigningKey, CardSigningKeyState
from apps.core.errors import NotFound
from apps.core.invalidation import TOPIC_CARD, cached
from apps.core.sealing import seal, unseal

logger = logging.getLogger(__name__)

CARD_SIGNING_KEYS = b"openwop.a2a.card-signing-keys.v1"
JWKS_PATH = "/.well-known/jwks.json"
JWS_TYPE = "JOSE"  # A2A 1.0 §Agent Card signing: typ SHOULD be "JOSE"


def _b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def grace_seconds() -> float:
    """How long a retired key stays in the JWKS (`OPENWOP_CARD_KEY_GRACE_SECONDS`, seconds)."""
    return max(0.0, float(settings.OPENWOP_CARD_KEY_GRACE_SECONDS))


def jwks_url() -> str:
    """The `jku` of every signature: this host's JWKS at its public origin."""
    return settings.OPENWOP_PUBLIC_URL + JWKS_PATH


# ---------------------------------------------------------------------------------------------
# Key material


@dataclass(frozen=True, slots=True)
class KeyMaterial:
    """A freshly generated pair: the sealed private key and the public JWK with its thumbprint."""

    kid: str
    public_jwk: dict[str, str]
    private_key_sealed: bytes


def jwk_thumbprint(public_jwk: dict[str, str]) -> str:
    """RFC 7638: SHA-256 over the required members in lexicographic order, base64url."""
    required = ("crv", "kty", "x", "y") if public_jwk["kty"] == "EC" else ("crv", "kty", "x")
    canonical = json.dumps({name: public_jwk[name] for name in required}, separators=(",", ":"), sort_keys=True)
    return _b64url(hashlib.sha256(canonical.encode("utf-8")).digest())


def key_material_generate(*, algorithm: str) -> KeyMaterial:
    """A new key pair for `algorithm` (EdDSA over Ed25519, or ES256 over P-256), sealed at once:
    the clear PEM exists only in this function's frame."""
    private: ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey
    if algorithm == CardSigningAlgorithm.EDDSA:
        private = ed25519.Ed25519PrivateKey.generate()
        raw = private.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        jwk = {"kty": "OKP", "crv": "Ed25519", "x": _b64url(raw)}
    elif algorithm == CardSigningAlgorithm.ES256:
        private = ec.generate_private_key(ec.SECP256R1())
        numbers = private.public_key().public_numbers()
        jwk = {
            "kty": "EC",
            "crv": "P-256",
            "x": _b64url(numbers.x.to_bytes(32, "big")),
            "y": _b64url(numbers.y.to_bytes(32, "big")),
        }
    else:
        raise ValueError(f"no card signing algorithm {algorithm!r}")
    pem = private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode("ascii")
    return KeyMaterial(kid=jwk_thumbprint(jwk), public_jwk=jwk, private_key_sealed=seal(pem, purpose=CARD_SIGNING_KEYS))


def public_jwk_of(key: CardSigningKey) -> dict[str, str]:
    """The key as a JWKS entry (RFC 7517): the public members plus kid, alg and use."""
    return {**key.public_jwk, "kid": key.kid, "alg": key.algorithm, "use": "sig"}


# ---------------------------------------------------------------------------------------------
# Reads


def card_signing_key_active() -> CardSigningKey | None:
    return CardSigningKey.objects.filter(state=CardSigningKeyState.ACTIVE).first()


def card_signing_key_by_kid(kid: str) -> CardSigningKey:
    """The key with this kid (`manage.py card_key activate|retire <kid>`), or NotFound."""
    key = CardSigningKey.objects.filter(kid=kid).first()
    if key is None:
        raise NotFound("No such card signing key.")
    return key


def card_signing_keys() -> list[CardSigningKey]:
    """Every key, newest first (`manage.py card_key list`)."""
    return list(CardSigningKey.objects.order_by("-created_at", "-id"))


@dataclass(frozen=True, slots=True)
class SigningStatus:
    """What discovery and the previews say: which key signs the cards, or that none does."""

    kid: str
    algorithm: str
    jwks_url: str


UNOPENABLE_KEY_ADVICE = (
    "card signing key %s cannot be opened with DJANGO_SECRET_KEY or DJANGO_SECRET_KEY_FALLBACKS, so cards are "
    "served unsigned: put the key that sealed it back in DJANGO_SECRET_KEY_FALLBACKS (then manage.py reseal), "
    "or make a new one with manage.py card_key generate --algorithm EdDSA --activate"
)


def _opens(key: CardSigningKey) -> bool:
    try:
        unseal(key.private_key_sealed, purpose=CARD_SIGNING_KEYS)
    except InvalidToken:
        return False
    return True


def _signing_status_load() -> SigningStatus | None:
    key = card_signing_key_active()
    if key is None or not _opens(key):
        return None  # discovery says what the cards are: unsigned (card_sign logs why)
    return SigningStatus(kid=key.kid, algorithm=key.algorithm, jwks_url=jwks_url())


def card_signing_status() -> SigningStatus | None:
    """The active key's kid and alg (None: cards go out unsigned), cached under the card topic."""
    return cached(TOPIC_CARD, ("signing-status", settings.OPENWOP_PUBLIC_URL), _signing_status_load)


def card_signing_advertised() -> dict[str, Any]:
    """Discovery `extensions."openwop-host.cardSigning"`: whether the cards are signed and by which
    key (the A2A card has no field saying so before it is fetched and checked)."""
    status = card_signing_status()
    if status is None:
        return {"signed": False}
    return {"signed": True, "kid": status.kid, "alg": status.algorithm, "jwksUrl": status.jwks_url}


# ---------------------------------------------------------------------------------------------
# Signing


def card_sign(card: AgentCard) -> AgentCard:
    """`card` signed by the active key (a copy; any signature it carried is replaced), or the card
    unchanged when no key is active. Call it once per card version (apps/a2a/card.py caches)."""
    key = card_signing_key_active()
    if key is None:
        return card
    try:
        private_pem = unseal(key.private_key_sealed, purpose=CARD_SIGNING_KEYS)
    except InvalidToken:
        # SECRET_KEY changed without its predecessor in the fallbacks: the card must still be
        # served, so unsigned (a verifying client then sees no signature, never a bad one). Loud,
        # with what to do, never the key. Once per card version (the signed card is cached).
        logger.error(UNOPENABLE_KEY_ADVICE, key.kid)
        return card
    signed = AgentCard()
    signed.CopyFrom(card)
    del signed.signatures[:]
    signer = create_agent_card_signer(
        signing_key=private_pem,
        protected_header={"kid": key.kid, "alg": key.algorithm, "jku": jwks_url(), "typ": JWS_TYPE},
    )
    return signer(signed)


# ---------------------------------------------------------------------------------------------
# The JWKS


@dataclass(frozen=True, slots=True)
class _PublishedKey:
    jwk: dict[str, str]
    retired_at: datetime | None  # None: the active key


def _published_keys_load() -> tuple[_PublishedKey, ...]:
    # Keys already past grace now are left out here; those that pass it later are dropped at
    # each request (time passing writes no row, so no invalidation would drop them).
    horizon = timezone.now() - timedelta(seconds=grace_seconds())
    keys = CardSigningKey.objects.filter(state=CardSigningKeyState.ACTIVE) | CardSigningKey.objects.filter(
        state=CardSigningKeyState.RETIRED, activated_at__isnull=False, retired_at__gt=horizon
    )
    return tuple(
        _PublishedKey(jwk=public_jwk_of(key), retired_at=key.retired_at)
        for key in keys.order_by("-activated_at", "-id")
    )


def jwks_document(*, now: datetime | None = None) -> tuple[bytes, str]:
    """`GET /.well-known/jwks.json`: its bytes and a strong ETag over them."""
    keys = cached(TOPIC_CARD, ("jwks", grace_seconds()), _published_keys_load)
    horizon = (now or timezone.now()) - timedelta(seconds=grace_seconds())
    document = {"keys": [k.jwk for k in keys if k.retired_at is None or k.retired_at > horizon]}
    body = json.dumps(document, sort_keys=True, separators=(",", ":")).encode("utf-8")
    return body, '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
