"""`/host/openwop-host/api/peer-credentials`: a tenant registers, lists and deletes the credentials
its workflows present to peers. The secret is sealed, never returned and never logged; another
tenant's credential is indistinguishable from an unknown one."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from cryptography.fernet import InvalidToken
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519, rsa
from django.contrib.auth import get_user_model
from django.test import Client
from jwt.algorithms import OKPAlgorithm

from apps.core.sealing import PUSH_CREDENTIALS, unseal
from apps.peers.models import PeerCredential
from apps.peers.selectors import PEER_CREDENTIALS, peer_authorization
from tests.peers.conftest import Caller

pytestmark = pytest.mark.django_db
PATH = "/host/openwop-host/api/peer-credentials"
SECRET = "very-secret-peer-token"


def test_create_list_delete_and_the_secret_never_comes_back(acme: Caller, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    created = acme.post(PATH, {"url": "https://peer.example.com:8443/a2a", "secret": SECRET, "label": "peer"})
    assert created.status_code == 201, created.content
    doc = created.json()
    assert doc["origin"] == "https://peer.example.com:8443" and doc["scheme"] == "Bearer"
    listed = acme.get(PATH).json()["peerCredentials"]
    assert [c["credentialId"] for c in listed] == [doc["credentialId"]]
    assert SECRET not in created.content.decode() + acme.get(PATH).content.decode()
    row = PeerCredential.unscoped_all_tenants.get(credential_id=doc["credentialId"])
    assert SECRET.encode() not in bytes(row.secret_sealed)  # sealed at rest
    assert unseal(row.secret_sealed, purpose=PEER_CREDENTIALS) == SECRET
    with pytest.raises(InvalidToken):  # another purpose's key cannot open it
        unseal(row.secret_sealed, purpose=PUSH_CREDENTIALS)
    assert peer_authorization(row) == f"Bearer {SECRET}"
    assert (
        acme.client.delete(f"{PATH}/{doc['credentialId']}", headers={"Authorization": f"Bearer {acme.key}"}).status_code
        == 204
    )
    assert acme.get(PATH).json()["peerCredentials"] == []
    assert SECRET not in caplog.text


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({"url": "http://peer.example.com/", "secret": "x"}, "webhook_url_rejected"),
        ({"url": "https://user:pw@peer.example.com/", "secret": "x"}, "webhook_url_rejected"),
        ({"url": "https://peer.example.com/", "secret": ""}, "validation_error"),
        ({"url": "https://peer.example.com/", "secret": "x", "scheme": "Bad Scheme"}, "validation_error"),
        ({"url": "https://peer.example.com/", "secret": "x", "extra": 1}, "validation_error"),
    ],
)
def test_bad_bodies_are_400(acme: Caller, body: dict, error: str) -> None:  # type: ignore[type-arg]
    response = acme.post(PATH, body)
    assert response.status_code == 400, response.content
    assert response.json()["error"] == error
    assert not PeerCredential.unscoped_all_tenants.exists()


def test_another_tenants_credential_is_not_found(acme: Caller, globex: Caller) -> None:
    theirs = globex.post(PATH, {"url": "https://peer.example.com/", "secret": SECRET}).json()["credentialId"]
    headers = {"Authorization": f"Bearer {acme.key}"}
    foreign = acme.client.delete(f"{PATH}/{theirs}", headers=headers)
    unknown = acme.client.delete(f"{PATH}/no-such-credential-id-000000", headers=headers)
    assert foreign.status_code == unknown.status_code == 404
    assert foreign.content == unknown.content
    assert acme.get(PATH).json()["peerCredentials"] == []
    assert PeerCredential.unscoped_all_tenants.filter(credential_id=theirs).exists()


def test_unauthenticated_is_401(client) -> None:  # type: ignore[no-untyped-def]
    assert client.get(PATH).status_code == 401


def test_the_admin_shows_credentials_but_never_their_secret(acme: Caller) -> None:
    credential_id = acme.post(PATH, {"url": "https://peer.example.com/", "secret": SECRET}).json()["credentialId"]
    row = PeerCredential.unscoped_all_tenants.get(credential_id=credential_id)
    admin = Client()
    admin.force_login(get_user_model().objects.create_superuser("op", "op@example.com", "pw-123456789"))
    listing = admin.get("/admin/peers/peercredential/")
    page = admin.get(f"/admin/peers/peercredential/{row.pk}/change/")
    assert listing.status_code == page.status_code == 200
    assert credential_id in listing.content.decode()
    for response in (listing, page):
        body = response.content.decode()
        assert SECRET not in body and bytes(row.secret_sealed).decode() not in body
    assert admin.post(f"/admin/peers/peercredential/{row.pk}/delete/", {"post": "yes"}).status_code == 403


# --- cardSignaturePolicy and pinnedCardKey (issue 21) ---------------------------------------------


def _ed25519_public_jwk() -> dict:  # type: ignore[type-arg]
    return {**OKPAlgorithm.to_jwk(ed25519.Ed25519PrivateKey.generate().public_key(), as_dict=True), "kid": "k1"}


def _patch(caller: Caller, credential_id: str, body: object) -> Any:
    return caller.client.patch(
        f"{PATH}/{credential_id}",
        data=json.dumps(body),
        content_type="application/json",
        headers={"Authorization": f"Bearer {caller.key}"},
    )


def test_card_signature_policy_defaults_to_verify_if_present_and_can_be_set(acme: Caller) -> None:
    default = acme.post(PATH, {"url": "https://peer.example.com/", "secret": SECRET}).json()
    assert default["cardSignaturePolicy"] == "verify-if-present" and default["pinnedCardKey"] is None
    jwk = _ed25519_public_jwk()
    created = acme.post(
        PATH,
        {"url": "https://peer.example.com/", "secret": SECRET, "cardSignaturePolicy": "require", "pinnedCardKey": jwk},
    )
    assert created.status_code == 201, created.content
    assert created.json()["cardSignaturePolicy"] == "require" and created.json()["pinnedCardKey"] == jwk
    row = PeerCredential.unscoped_all_tenants.get(credential_id=created.json()["credentialId"])
    assert (row.card_signature_policy, row.pinned_card_key) == ("require", jwk)

    credential_id = default["credentialId"]
    pem = (
        rsa.generate_private_key(public_exponent=65537, key_size=2048)
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    updated = _patch(acme, credential_id, {"cardSignaturePolicy": "ignore", "pinnedCardKey": pem})
    assert updated.status_code == 200, updated.content
    assert updated.json()["cardSignaturePolicy"] == "ignore" and updated.json()["pinnedCardKey"]["kty"] == "RSA"
    assert "d" not in updated.json()["pinnedCardKey"]
    cleared = _patch(acme, credential_id, {"pinnedCardKey": None}).json()
    assert cleared["pinnedCardKey"] is None and cleared["cardSignaturePolicy"] == "ignore"
    listed = {c["credentialId"]: c for c in acme.get(PATH).json()["peerCredentials"]}
    assert listed[credential_id]["cardSignaturePolicy"] == "ignore"


def _private_pem() -> str:
    return (
        ed25519.Ed25519PrivateKey.generate()
        .private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        .decode()
    )


@pytest.mark.parametrize(
    "fields",
    [
        {"cardSignaturePolicy": "sometimes"},
        {"cardSignaturePolicy": 7},
        {"cardSignaturePolicy": None},
        {"pinnedCardKey": {**_ed25519_public_jwk(), "d": "c2VjcmV0"}},  # a private JWK
        {"pinnedCardKey": {"kty": "oct", "k": "c2VjcmV0"}},  # a symmetric key
        {"pinnedCardKey": _private_pem()},
        {"pinnedCardKey": "-----BEGIN PUBLIC KEY-----\nnot a key\n-----END PUBLIC KEY-----\n"},
        {"pinnedCardKey": "not a key"},
        {"pinnedCardKey": [1, 2]},
        {"pinnedCardKey": {**_ed25519_public_jwk(), "alg": "HS256"}},
        {"pinnedCardKey": {"kty": "OKP", "crv": "Ed25519", "x": "!!"}},
    ],
)
def test_bad_card_signature_fields_are_400_on_create_and_update(acme: Caller, fields: dict) -> None:  # type: ignore[type-arg]
    response = acme.post(PATH, {"url": "https://peer.example.com/", "secret": "x", **fields})
    assert response.status_code == 400, response.content
    assert response.json()["error"] == "validation_error"
    assert not PeerCredential.unscoped_all_tenants.exists()
    credential_id = acme.post(PATH, {"url": "https://peer.example.com/", "secret": "x"}).json()["credentialId"]
    patched = _patch(acme, credential_id, fields)
    assert patched.status_code == 400 and patched.json()["error"] == "validation_error"
    row = PeerCredential.unscoped_all_tenants.get(credential_id=credential_id)
    assert (row.card_signature_policy, row.pinned_card_key) == ("verify-if-present", None)


def test_update_takes_no_other_member(acme: Caller) -> None:
    credential_id = acme.post(PATH, {"url": "https://peer.example.com/", "secret": "x"}).json()["credentialId"]
    for body in ({"url": "https://other.example.com/"}, {"scheme": "Basic"}, {"origin": "https://x.example.com"}):
        response = _patch(acme, credential_id, body)
        assert response.status_code == 400 and response.json()["error"] == "validation_error"


def test_the_secret_is_replaced_in_place_never_shown_and_not_across_tenants(
    acme: Caller, globex: Caller, caplog: pytest.LogCaptureFixture
) -> None:
    """Rotation (docs/operators/secrets-and-rotation.md): the same credentialId, so the workflows
    naming it need no edit; the next call presents the new secret."""
    caplog.set_level(logging.DEBUG)
    credential_id = acme.post(PATH, {"url": "https://peer.example.com/", "secret": SECRET}).json()["credentialId"]
    rotated = _patch(acme, credential_id, {"secret": "the-new-peer-token"})
    assert rotated.status_code == 200, rotated.content
    assert "the-new-peer-token" not in rotated.content.decode() and SECRET not in rotated.content.decode()
    row = PeerCredential.unscoped_all_tenants.get(credential_id=credential_id)
    assert peer_authorization(row) == "Bearer the-new-peer-token"
    for bad in ("", "two\nlines"):
        assert _patch(acme, credential_id, {"secret": bad}).status_code == 400
    # Another tenant's credential: exactly an unknown id's answer, and its secret unchanged.
    theirs = globex.post(PATH, {"url": "https://peer.example.com/", "secret": SECRET}).json()["credentialId"]
    foreign = _patch(acme, theirs, {"secret": "taken-over"})
    unknown = _patch(acme, "no-such-credential-id-000000", {"secret": "taken-over"})
    assert foreign.status_code == unknown.status_code == 404 and foreign.content == unknown.content
    assert peer_authorization(PeerCredential.unscoped_all_tenants.get(credential_id=theirs)) == f"Bearer {SECRET}"
    assert "the-new-peer-token" not in caplog.text and "taken-over" not in caplog.text


def test_another_tenants_credential_cannot_be_updated(acme: Caller, globex: Caller) -> None:
    theirs = globex.post(PATH, {"url": "https://peer.example.com/", "secret": SECRET}).json()["credentialId"]
    foreign = _patch(acme, theirs, {"cardSignaturePolicy": "ignore"})
    unknown = _patch(acme, "no-such-credential-id-000000", {"cardSignaturePolicy": "ignore"})
    assert foreign.status_code == unknown.status_code == 404
    assert foreign.content == unknown.content
    assert PeerCredential.unscoped_all_tenants.get(credential_id=theirs).card_signature_policy == "verify-if-present"


def test_the_admin_shows_the_policy_and_its_actions_set_it(acme: Caller) -> None:
    jwk = _ed25519_public_jwk()
    credential_id = acme.post(
        PATH, {"url": "https://peer.example.com/", "secret": SECRET, "pinnedCardKey": jwk}
    ).json()["credentialId"]
    row = PeerCredential.unscoped_all_tenants.get(credential_id=credential_id)
    admin = Client()
    admin.force_login(get_user_model().objects.create_superuser("op", "op@example.com", "pw-123456789"))
    page = admin.get(f"/admin/peers/peercredential/{row.pk}/change/").content.decode()
    assert "verify-if-present" in page.lower() or "Verify a signature" in page
    assert jwk["x"] in page  # the pinned public key is shown; there is no private part to hide
    response = admin.post(
        "/admin/peers/peercredential/", {"action": "require_signed_cards", "_selected_action": [row.pk]}
    )
    assert response.status_code == 302
    row.refresh_from_db()
    assert row.card_signature_policy == "require"
    assert admin.post(f"/admin/peers/peercredential/{row.pk}/change/", {"label": "x"}).status_code == 403
