"""TenantOwnedModel's manager fails closed without a tenant (STYLE.md habit 4)."""

from __future__ import annotations

import pytest

from apps.tenants.models import ApiKey, TenantScopeMissing
from apps.tenants.services import api_key_create, tenant_get_or_create

pytestmark = pytest.mark.django_db


def test_objects_refuses_an_unscoped_query() -> None:
    with pytest.raises(TenantScopeMissing):
        list(ApiKey.objects.all())
    with pytest.raises(TenantScopeMissing):
        ApiKey.objects.filter(kind="user")


def test_for_tenant_sees_only_that_tenant() -> None:
    acme, _ = tenant_get_or_create(slug="acme")
    globex, _ = tenant_get_or_create(slug="globex")
    mine, _ = api_key_create(tenant=acme)
    api_key_create(tenant=globex)
    assert list(ApiKey.objects.for_tenant(acme)) == [mine]
    assert ApiKey.objects.for_tenant(globex).count() == 1


def test_create_needs_a_tenant() -> None:
    with pytest.raises(TenantScopeMissing):
        ApiKey.objects.create(prefix="x", secret_digest="y", subject_id="z")


@pytest.mark.parametrize("slug", ["", "has space", "a/b", "x" * 129, "ünï"])
def test_tenant_slug_grammar(slug: str) -> None:
    from apps.core.errors import ValidationFailed

    with pytest.raises(ValidationFailed):
        tenant_get_or_create(slug=slug)
