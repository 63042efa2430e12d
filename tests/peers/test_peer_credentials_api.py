"""`/host/openwop-host/api/peer-credentials`: a tenant registers, lists and deletes the credentials
its workflows present to peers. The secret is sealed, never returned and never logged; another
tenant's credential is indistinguishable from an unknown one."""

from __future__ import annotations

import logging

import pytest
from cryptography.fernet import InvalidToken
from django.contrib.auth import get_user_model
from django.test import Client

from apps.core.sealing import PUSH_CREDENTIALS, unseal
from apps.peers.models import PeerCredential
from apps.peers.selectors import PEER_CREDENTIALS, peer_authorization
from tests.peers.conftest import Caller

pytestmark = pytest.mark.django_db
PATH = "/host/openwop-host/api/peer-credentials"
SECRET = "very-secret-peer-token"


def test_create_list_delete_and_the_secret_never_comes_back(
    acme: Caller, caplog: pytest.LogCaptureFixture
) -> None:
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
    assert acme.client.delete(f"{PATH}/{doc['credentialId']}", headers={"Authorization": f"Bearer {acme.key}"}
                              ).status_code == 204
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
