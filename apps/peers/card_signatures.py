"""Whether a peer's agent card is the card its signer signed, checked before anything is sent to
the peer (A2A 1.0 §Agent Card signing: "a consuming host SHOULD verify before invoking and MAY
refuse an unsigned card").

The signatures are checked with the a2a-sdk's own verifier (JWS over the JCS-canonical card). The
key comes from the key the operator pinned on the peer credential, else from the protected
header's `jku`, fetched through the egress guard and only from the card's own origin; then the
JWK with the header's `kid`. A key that cannot be had that way makes that signature bad.

A verified card is remembered (by its exact bytes, the card URL, the key source and the tenant) for
VERIFIED_TTL_SECONDS, so an unchanged card is not verified, nor its JWKS fetched, on every call.
Refusals are not remembered: a JWKS that was briefly unreachable must not refuse the peer for long.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from a2a.types import AgentCard
from a2a.utils.signing import SignatureVerificationError, create_signature_verifier
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa
from django.core.cache import cache
from jwt import PyJWK
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm
from jwt.exceptions import PyJWKError

from apps.core.errors import ValidationFailed
from apps.peers.models import CardSignaturePolicy
from apps.peers.outbound import PEER_CARD_SIGNATURE_INVALID, PEER_CARD_UNSIGNED, CardTrust, PeerFailure
from apps.peers.selectors import peer_origin_of

logger = logging.getLogger(__name__)

# Asymmetric only: a symmetric (HS*) or `none` signature proves nothing about who signed.
SIGNATURE_ALGORITHMS = ["EdDSA", "ES256", "ES384", "ES512", "RS256", "RS384", "RS512", "PS256", "PS384", "PS512"]
VERIFIED_TTL_SECONDS = 300
MIN_RSA_BITS = 2048
_PUBLIC_MEMBERS = {"kty", "crv", "x", "y", "n", "e", "kid", "alg", "use"}
_PRIVATE_MEMBERS = {"d", "p", "q", "dp", "dq", "qi", "oth", "k"}
_KEY_TYPES = {"OKP", "EC", "RSA"}

# jku -> the JSON document served there (None when unreadable); may raise PeerFailure.
JwksFetch = Callable[[str], Any]


class KeyUnavailable(PyJWKError):
    """No usable key for a signature: the a2a-sdk verifier counts that signature as bad."""


# --- the operator's pinned key --------------------------------------------------------------------


def pinned_card_key_parse(value: object) -> dict[str, Any]:
    """The public JWK of a key an operator pins: a JWK (object or JSON text) or a PEM public key.

    Public material only: a private key (JWK private members, a PEM PRIVATE KEY) or a symmetric one
    is refused, so a secret pasted by mistake is never stored."""
    if isinstance(value, str) and value.lstrip().startswith("-----BEGIN"):
        return _jwk_from_pem(value)
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise _bad_pin("pinnedCardKey must be a public JWK (object or JSON) or a PEM public key.") from None
    if not isinstance(value, dict):
        raise _bad_pin("pinnedCardKey must be a public JWK (object or JSON) or a PEM public key.")
    if _PRIVATE_MEMBERS & value.keys():
        raise _bad_pin("pinnedCardKey is a private or symmetric key; pin its public key only.")
    return public_jwk(value, refuse=_bad_pin)


def _jwk_from_pem(text: str) -> dict[str, Any]:
    if "PRIVATE KEY" in text:
        raise _bad_pin("pinnedCardKey is a private key; pin its public key only.")
    try:
        key = serialization.load_pem_public_key(text.encode())
    except (ValueError, TypeError, UnsupportedAlgorithm):
        raise _bad_pin("pinnedCardKey is not a PEM public key.") from None
    if isinstance(key, rsa.RSAPublicKey):
        jwk = RSAAlgorithm.to_jwk(key, as_dict=True)
    elif isinstance(key, ec.EllipticCurvePublicKey):
        jwk = ECAlgorithm.to_jwk(key, as_dict=True)
    elif isinstance(key, (ed25519.Ed25519PublicKey, ed448.Ed448PublicKey)):
        jwk = OKPAlgorithm.to_jwk(key, as_dict=True)
    else:
        raise _bad_pin("pinnedCardKey must be an Ed25519, EC or RSA public key.")
    return public_jwk(dict(jwk), refuse=_bad_pin)


def _bad_pin(message: str) -> ValidationFailed:
    return ValidationFailed(message, details={"field": "pinnedCardKey"})


def public_jwk(jwk: Mapping[str, Any], *, refuse: Callable[[str], Exception]) -> dict[str, Any]:
    """`jwk` reduced to its public members, checked to be a usable asymmetric verification key."""
    if _PRIVATE_MEMBERS & jwk.keys():
        raise refuse("The key is private or symmetric.")
    if jwk.get("kty") not in _KEY_TYPES:
        raise refuse("The key must be an OKP (Ed25519), EC or RSA key.")
    if "alg" in jwk and jwk["alg"] not in SIGNATURE_ALGORITHMS:
        raise refuse(f"The key's alg must be one of {', '.join(SIGNATURE_ALGORITHMS)}.")
    public = {name: value for name, value in jwk.items() if name in _PUBLIC_MEMBERS}
    try:
        key = PyJWK(public).key
    except Exception:  # PyJWT raises several types for a malformed JWK
        raise refuse("The key is not a valid JWK.") from None
    if isinstance(key, rsa.RSAPublicKey) and key.key_size < MIN_RSA_BITS:
        raise refuse(f"An RSA key must have at least {MIN_RSA_BITS} bits.")
    return public


def _verification_key(jwk: Mapping[str, Any]) -> Any:
    """A JWK that names its `alg` verifies that algorithm only (PyJWK binds it); one that does not
    verifies whichever allowed algorithm its key type fits."""
    public = public_jwk(jwk, refuse=KeyUnavailable)
    return PyJWK(public) if "alg" in public else PyJWK(public).key


# --- verification ---------------------------------------------------------------------------------


def card_signatures_check(
    *,
    trust: CardTrust,
    tenant: str,
    card_url: str,
    document: Any,
    card: AgentCard | None,
    fetch_jwks: JwksFetch,
) -> str:
    """Apply `trust.policy` to the fetched card; return `verified`, `unsigned` or `ignored`, or raise
    the PeerFailure that fails the calling node before anything is sent to the peer."""
    if trust.policy == CardSignaturePolicy.IGNORE:
        return "ignored"
    signed = isinstance(document, dict) and bool(document.get("signatures"))
    if not signed:
        if trust.policy == CardSignaturePolicy.REQUIRE:
            raise PeerFailure(PEER_CARD_UNSIGNED, "The peer's agent card is not signed.", {"policy": trust.policy})
        return "unsigned"
    key_source = "pinned" if trust.pinned_key else "jku"
    cache_key = verified_card_cache_key(tenant=tenant, card_url=card_url, document=document, trust=trust)
    if _cache_get(cache_key):
        return "verified"
    if card is None or not _verifies(card, trust=trust, card_url=card_url, fetch_jwks=fetch_jwks):
        raise PeerFailure(
            PEER_CARD_SIGNATURE_INVALID,
            "No signature on the peer's agent card verifies.",
            {"policy": trust.policy, "keySource": key_source},
        )
    _cache_set(cache_key)
    return "verified"


def _verifies(card: AgentCard, *, trust: CardTrust, card_url: str, fetch_jwks: JwksFetch) -> bool:
    jwks: dict[str, Any] = {}  # jku -> document, fetched at most once per check

    def key_provider(kid: str | None, jku: str | None) -> Any:
        if trust.pinned_key:
            return _verification_key(trust.pinned_key)
        if not isinstance(kid, str) or not kid or not isinstance(jku, str) or not same_origin(jku, card_url):
            raise KeyUnavailable("The signature names no kid, or no jku on the card's own origin.")
        if jku not in jwks:
            try:
                jwks[jku] = fetch_jwks(jku)
            except PeerFailure:  # refused by the egress guard, unreachable, too large
                jwks[jku] = None
        keys = jwks[jku].get("keys") if isinstance(jwks[jku], dict) else None
        for jwk in keys if isinstance(keys, list) else []:
            if isinstance(jwk, dict) and jwk.get("kid") == kid:
                return _verification_key(jwk)
        raise KeyUnavailable("The jku serves no key with the signature's kid.")

    verifier = create_signature_verifier(key_provider, algorithms=SIGNATURE_ALGORITHMS)
    try:
        verifier(card)
    except SignatureVerificationError:
        return False
    except (ValueError, TypeError, AttributeError):  # a key PyJWT took but cannot verify with
        logger.info("peer card signature check failed on a malformed key", exc_info=True)
        return False
    return True


def same_origin(url: str, card_url: str) -> bool:
    """Scheme, host and port equal (default port elided), over https only."""
    try:
        return urlsplit(url).scheme.lower() == "https" and peer_origin_of(url) == peer_origin_of(card_url)
    except ValueError:  # an unparsable port
        return False


def verified_card_cache_key(*, tenant: str, card_url: str, document: Any, trust: CardTrust) -> str:
    """The one name of a verified-card entry (STYLE.md habit 10: includes the tenant)."""
    material = json.dumps(
        {"url": card_url, "card": document, "pinned": trust.pinned_key}, sort_keys=True, separators=(",", ":")
    )
    return f"openwop-host:peers:card-verified:{tenant}:{hashlib.sha256(material.encode()).hexdigest()}"


def _cache_get(key: str) -> bool:
    try:
        return bool(cache.get(key))
    except Exception:  # an unreachable cache costs a re-verification, not the call
        logger.warning("card verification cache unreachable; verifying again")
        return False


def _cache_set(key: str) -> None:
    try:
        cache.set(key, True, VERIFIED_TTL_SECONDS)
    except Exception:  # see _cache_get
        logger.warning("card verification cache unreachable; not remembering the result")
