"""Card signing keys in the admin (issue 21): generated from the algorithm alone, activated and
retired through the audited services, never showing private material, and saying when cards go
out unsigned."""

from __future__ import annotations

import base64
import html

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from django.contrib.auth.models import User
from django.db import DatabaseError, transaction
from django.test import Client

from apps.a2a.models import (
    CardSigningKey,
    CardSigningKeyAction,
    CardSigningKeyChange,
    CardSigningKeyChangeRefused,
    CardSigningKeyState,
)
from apps.a2a.signing import CARD_SIGNING_KEYS
from apps.core.sealing import unseal
from apps.facets.services import facet_ensure

pytestmark = pytest.mark.django_db

KEYS = "/admin/a2a/cardsigningkey/"


@pytest.fixture
def operator_client(client: Client) -> Client:
    facet_ensure(protocol="a2a")
    client.force_login(User.objects.create_superuser("root", "root@example.test", "pw"))
    return client


def _b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def private_markers(key: CardSigningKey) -> list[str]:
    """Everything that would betray the private key on a page: its PEM, its JWK `d`, the token."""
    pem = unseal(key.private_key_sealed, purpose=CARD_SIGNING_KEYS)
    private = serialization.load_pem_private_key(pem.encode(), password=None)
    if isinstance(private, ed25519.Ed25519PrivateKey):
        d = _b64url(private.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                                          serialization.NoEncryption()))  # fmt: skip
    else:
        assert isinstance(private, ec.EllipticCurvePrivateKey)
        d = _b64url(private.private_numbers().private_value.to_bytes(32, "big"))
    body = "".join(pem.splitlines()[1:-1])
    return [d, "PRIVATE KEY", body[:40], bytes(key.private_key_sealed).decode()[:40]]


def _add(client: Client, algorithm: str) -> CardSigningKey:
    response = client.post(f"{KEYS}add/", {"algorithm": algorithm})
    assert response.status_code == 302, response.content
    return CardSigningKey.objects.order_by("-id").first()  # type: ignore[return-value]


def _act(client: Client, action: str, *keys: CardSigningKey) -> str:
    response = client.post(KEYS, {"action": action, "_selected_action": [str(k.pk) for k in keys]}, follow=True)
    assert response.status_code == 200
    return response.content.decode()


def test_generate_activate_retire_audited_and_never_showing_private_material(operator_client: Client) -> None:
    page = html.unescape(operator_client.get(KEYS).content.decode())
    assert "No signing key is active: agent cards are served unsigned" in page
    assert 'id="served-card-summary"' in page and "nobody: served unsigned" in page
    assert '"supportedInterfaces"' not in page  # a summary of the card, never the whole card (issue 53)

    add_form = operator_client.get(f"{KEYS}add/").content.decode()
    assert 'name="algorithm"' in add_form and 'name="kid"' not in add_form and "private" not in add_form.lower()

    first = _add(operator_client, "EdDSA")
    second = _add(operator_client, "ES256")
    assert first.state == second.state == CardSigningKeyState.GENERATED
    assert first.public_jwk["crv"] == "Ed25519" and second.public_jwk["crv"] == "P-256"

    page = _act(operator_client, "activate_key", first)
    assert f"Key {first.kid} now signs every agent card." in page
    page = html.unescape(operator_client.get(KEYS).content.decode())
    assert f"Agent cards are signed by kid {first.kid} (EdDSA)" in page and "served unsigned" not in page
    assert f'<dd id="served-card-signers">{first.kid} (EdDSA)</dd>' in page  # the served card's signature
    assert '"signatures"' not in page and '"supportedInterfaces"' not in page

    page = _act(operator_client, "activate_key", second)  # rotation: the first key is retired
    first.refresh_from_db()
    second.refresh_from_db()
    assert first.state == CardSigningKeyState.RETIRED and first.retired_at is not None
    assert second.state == CardSigningKeyState.ACTIVE

    page = _act(operator_client, "activate_key", first)  # a retired key never signs again
    assert "is retired; generate a new key instead" in page
    assert CardSigningKey.objects.get(pk=first.pk).state == CardSigningKeyState.RETIRED
    assert "Select exactly one key" in _act(operator_client, "activate_key", first, second)

    _act(operator_client, "retire_keys", second)
    assert CardSigningKey.objects.get(pk=second.pk).state == CardSigningKeyState.RETIRED
    assert "agent cards are served unsigned" in operator_client.get(KEYS).content.decode()

    # No page shows private material: the changelist, each key's page, the audit trail.
    pages = [
        operator_client.get(KEYS).content.decode(),
        operator_client.get(f"{KEYS}{first.pk}/change/").content.decode(),
        operator_client.get(f"{KEYS}{second.pk}/change/").content.decode(),
        operator_client.get("/admin/a2a/cardsigningkeychange/").content.decode(),
    ]
    assert first.kid in pages[1] and first.public_jwk["x"] in pages[1]  # the public half is shown
    for key in (first, second):
        for marker in private_markers(key):
            assert all(marker not in page for page in pages), marker
    assert operator_client.post(f"{KEYS}{first.pk}/delete/").status_code == 403

    # Every change audited, by the operator who made it; never any key material in the row.
    trail = [(c.kid, c.action, c.actor) for c in CardSigningKeyChange.objects.order_by("at", "id")]
    assert trail == [
        (first.kid, CardSigningKeyAction.GENERATE, "admin:root"),
        (second.kid, CardSigningKeyAction.GENERATE, "admin:root"),
        (first.kid, CardSigningKeyAction.ACTIVATE, "admin:root"),
        (first.kid, CardSigningKeyAction.RETIRE, "admin:root"),
        (second.kid, CardSigningKeyAction.ACTIVATE, "admin:root"),
        (second.kid, CardSigningKeyAction.RETIRE, "admin:root"),
    ]
    for change in CardSigningKeyChange.objects.all():
        assert set(change.after) == {"kid", "algorithm", "state", "activatedAt", "retiredAt"}


def test_the_key_audit_trail_is_append_only(operator_client: Client) -> None:
    key = _add(operator_client, "EdDSA")
    change = CardSigningKeyChange.objects.get(kid=key.kid)
    with pytest.raises(CardSigningKeyChangeRefused):
        change.save()
    with pytest.raises(CardSigningKeyChangeRefused):
        change.delete()
    with pytest.raises(DatabaseError), transaction.atomic():  # the trigger refuses what bypasses the model
        CardSigningKeyChange.objects.filter(pk=change.pk).update(actor="someone else")
    assert CardSigningKeyChange.objects.get(pk=change.pk).actor == "admin:root"


def test_only_one_key_is_ever_active(operator_client: Client) -> None:
    first, second = _add(operator_client, "EdDSA"), _add(operator_client, "EdDSA")
    _act(operator_client, "activate_key", first)
    _act(operator_client, "activate_key", second)
    assert list(CardSigningKey.objects.filter(state=CardSigningKeyState.ACTIVE)) == [second]
    with pytest.raises(DatabaseError), transaction.atomic():  # the constraint, not just the service
        CardSigningKey.objects.filter(pk=first.pk).update(state=CardSigningKeyState.ACTIVE)
