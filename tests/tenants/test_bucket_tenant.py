"""The bucket -> tenant table the request limits read before authentication (issue 49 item 3):
learned where a key authenticates, read with no query, with the tenant's budget row; forgotten
when the key is revoked (the `apikey` invalidation), so a revoked key is no longer its tenant's."""

from __future__ import annotations

from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.core.invalidation import TOPIC_APIKEY, cache_generation
from apps.core.rate_limits import BucketTenant, bucket_tenant, caller_key
from apps.tenants.models import TenantBudget
from apps.tenants.selectors import subject_from_authorization, subject_from_authorization_cached
from apps.tenants.services import api_key_create, api_key_revoke, tenant_get_or_create
from tests.core.test_invalidation import invalidated, listening, settle

__all__ = ["listening"]  # the fixture, used by name


def test_a_key_teaches_its_bucket_tenant_until_it_is_revoked(listening: None) -> None:
    tenant, _ = tenant_get_or_create(slug="acme")
    TenantBudget.objects.create(tenant=tenant, requests_per_minute=7)
    key, raw = api_key_create(tenant=tenant)
    _, other_raw = api_key_create(tenant=tenant)
    settle()
    header, bucket = f"Bearer {raw}", caller_key(f"Bearer {raw}")
    assert bucket is not None and bucket_tenant(bucket) is None  # never seen in this process

    subject_from_authorization(header)  # the REST door's (uncached) authentication teaches it too
    learned = bucket_tenant(bucket)
    assert isinstance(learned, BucketTenant)
    assert (learned.pk, learned.slug, learned.requests_per_minute, learned.streams) == (tenant.pk, "acme", 7, None)
    subject_from_authorization_cached(header)  # the key's own cache filled (one read of the key)
    with CaptureQueriesContext(connection) as queries:
        assert bucket_tenant(bucket) == learned
        subject_from_authorization_cached(header)  # the tenant known and fresh: nothing read again
    assert len(queries) == 0, queries.captured_queries

    before = cache_generation(TOPIC_APIKEY)
    api_key_revoke(api_key=key)
    assert invalidated(TOPIC_APIKEY, before)
    assert bucket_tenant(bucket) is None  # the revoked key's requests are no longer its tenant's
    # Another key of the tenant is learned again on its next authentication.
    other_bucket = caller_key(f"Bearer {other_raw}")
    assert other_bucket is not None
    subject_from_authorization_cached(f"Bearer {other_raw}")
    relearned = bucket_tenant(other_bucket)
    assert relearned is not None and relearned.pk == tenant.pk
