"""Writes for tenants and API keys."""

from __future__ import annotations

import hashlib
import secrets

from django.db import transaction
from django.utils import timezone

from apps.core.errors import ValidationFailed
from apps.core.ids import TENANT_SLUG_RE
from apps.core.invalidation import TOPIC_APIKEY, TOPIC_BUDGET, invalidate_on_commit
from apps.tenants.budgets import BUDGET_NAMES, api_keys_admit
from apps.tenants.hooks import run_tenant_created_hooks
from apps.tenants.models import ApiKey, ApiKeyKind, Tenant, TenantBudget

KEY_SCHEME = "owk"


def secret_digest(secret: str) -> str:
    # The secret is 256 random bits: a fast digest is enough (nothing to brute-force).
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def tenant_get_or_create(*, slug: str, name: str = "") -> tuple[Tenant, bool]:
    if not TENANT_SLUG_RE.match(slug):
        raise ValidationFailed("A tenant slug is 1-128 characters of [A-Za-z0-9._-].", details={"field": "slug"})
    with transaction.atomic():
        tenant, created = Tenant.objects.get_or_create(slug=slug, defaults={"name": name or slug})
        if created:  # the hooks other apps add for a new tenant (e.g. fixture workflows), after commit
            transaction.on_commit(lambda: run_tenant_created_hooks(tenant.pk))
    return tenant, created


def api_key_create(*, tenant: Tenant, kind: str = ApiKeyKind.USER, label: str = "") -> tuple[ApiKey, str]:
    """Create a key and return it with its raw value, which is never stored and never shown again.

    Past the tenant's api_keys budget (active keys; apps/tenants/budgets.py) it raises RateLimited
    and creates nothing. The tenant's row is locked meanwhile, so concurrent mints count in turn."""
    if kind not in ApiKeyKind.values:
        raise ValidationFailed("kind must be 'user' or 'agent'.", details={"field": "kind"})
    prefix = secrets.token_hex(6)
    secret = secrets.token_urlsafe(32)
    with transaction.atomic():
        Tenant.objects.select_for_update().filter(pk=tenant.pk).values_list("pk", flat=True).first()
        api_keys_admit(tenant=tenant)
        api_key = ApiKey.objects.create(
            tenant=tenant,
            prefix=prefix,
            secret_digest=secret_digest(secret),
            subject_id=f"key-{secrets.token_hex(12)}",
            kind=kind,
            label=label,
        )
    return api_key, f"{KEY_SCHEME}_{prefix}.{secret}"


def api_key_revoke(*, api_key: ApiKey) -> ApiKey:
    """Revoke: the next request with this key gets 401 credential_revoked (revocation next-request)."""
    if api_key.revoked_at is None:
        api_key.revoked_at = timezone.now()
        api_key.save(update_fields=["revoked_at"])
        # Every process drops the key through its table's trigger; this one does not wait for it.
        invalidate_on_commit(TOPIC_APIKEY)
    return api_key


def tenant_budget_set(*, tenant: Tenant, values: dict[str, int | None]) -> TenantBudget:
    """Set some of the tenant's budgets (None: back to the host default; 0: unlimited). The table's
    trigger empties every process's budget cache on commit (apps/tenants/budgets.py)."""
    unknown = set(values) - set(BUDGET_NAMES)
    if unknown:
        raise ValidationFailed(f"unknown budgets: {', '.join(sorted(unknown))}", details={"field": "budget"})
    for name, value in values.items():
        if value is not None and value < 0:
            raise ValidationFailed(f"{name} is 0 (unlimited) or more.", details={"field": name})
    with transaction.atomic(durable=True):
        budget, _ = TenantBudget.objects.select_for_update().get_or_create(tenant=tenant)
        for name, value in values.items():
            setattr(budget, name, value)
        budget.save()
        invalidate_on_commit(TOPIC_BUDGET)  # this process at once; the others by the trigger
    return budget


def tenant_budget_clear(*, tenant: Tenant) -> bool:
    """Every budget of the tenant back to the host default; True when it had an override row."""
    with transaction.atomic(durable=True):
        deleted, _ = TenantBudget.objects.filter(tenant=tenant).delete()
        invalidate_on_commit(TOPIC_BUDGET)
    return deleted > 0
