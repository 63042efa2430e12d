"""Operators manage tenants and keys in the admin: the key is shown once; revoke calls the service."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from apps.tenants.models import ApiKey
from apps.tenants.selectors import subject_from_api_key
from apps.tenants.services import api_key_create, tenant_get_or_create

pytestmark = pytest.mark.django_db
KEY_IN_PAGE = re.compile(r"owk_[0-9a-f]{12}\.[A-Za-z0-9_-]{40,}")


@pytest.fixture
def operator_client(client: Client) -> Client:
    user = User.objects.create_superuser("op", "op@example.test", "pw-not-used-elsewhere")
    client.force_login(user)
    return client


def test_migration_creates_the_staff_groups() -> None:
    assert set(Group.objects.values_list("name", flat=True)) >= {"operators", "auditors"}


def test_adding_a_key_shows_the_raw_key_once(operator_client: Client) -> None:
    tenant, _ = tenant_get_or_create(slug="acme")
    response = operator_client.post(
        "/admin/tenants/apikey/add/", {"tenant": tenant.pk, "kind": "agent", "label": "ci"}, follow=True
    )
    assert response.status_code == 200
    shown = KEY_IN_PAGE.findall(response.content.decode())
    assert len(shown) == 1
    assert subject_from_api_key(shown[0]).kind == "agent"
    key = ApiKey.objects.for_tenant(tenant).get()
    # Never again: the change page and the list do not carry the secret.
    for url in (f"/admin/tenants/apikey/{key.pk}/change/", "/admin/tenants/apikey/"):
        page = operator_client.get(url).content.decode()
        assert not KEY_IN_PAGE.search(page)
        assert shown[0].split(".")[1] not in page


def test_revoke_action_revokes_through_the_service(operator_client: Client) -> None:
    tenant, _ = tenant_get_or_create(slug="acme")
    key, raw = api_key_create(tenant=tenant)
    response = operator_client.post(
        "/admin/tenants/apikey/", {"action": "revoke_keys", "_selected_action": [key.pk]}, follow=True
    )
    assert response.status_code == 200
    key.refresh_from_db()
    assert key.revoked_at is not None
    from apps.core.errors import CredentialRevoked

    with pytest.raises(CredentialRevoked):
        subject_from_api_key(raw)


def test_keys_cannot_be_deleted_from_the_admin(operator_client: Client) -> None:
    tenant, _ = tenant_get_or_create(slug="acme")
    key, _ = api_key_create(tenant=tenant)
    assert operator_client.get(f"/admin/tenants/apikey/{key.pk}/delete/").status_code == 403
