"""Tenants, API keys, and the abstract base every tenant-owned model inherits."""

from __future__ import annotations

from typing import Any

from django.core.validators import RegexValidator
from django.db import models

from apps.core.ids import TENANT_SLUG_RE


class TenantScopeMissing(RuntimeError):
    """Raised when a tenant-owned table is queried without naming a tenant (fail closed)."""


class Tenant(models.Model):
    slug = models.CharField(
        max_length=128,
        unique=True,
        validators=[RegexValidator(TENANT_SLUG_RE, "A tenant slug is 1-128 of [A-Za-z0-9._-].")],
        help_text="The OpenWOP tenantId: the first segment of every tenant-bound id.",
    )
    name = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["slug"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(slug__regex=r"^[A-Za-z0-9._-]{1,128}$"), name="tenant_slug_grammar"
            )
        ]

    def __str__(self) -> str:
        return self.slug


class TenantScopedManager(models.Manager):
    """`Model.objects`: refuses to build a query until a tenant is named via `for_tenant`."""

    def get_queryset(self) -> models.QuerySet:
        raise TenantScopeMissing(
            f"{self.model.__name__}.objects needs .for_tenant(tenant); "
            "the audited escape hatch is .unscoped_all_tenants"
        )

    def for_tenant(self, tenant: Tenant | int) -> models.QuerySet:
        tenant_id = tenant.pk if isinstance(tenant, Tenant) else tenant
        if tenant_id is None:
            raise TenantScopeMissing("for_tenant() needs a saved tenant")
        return models.QuerySet(self.model, using=self._db).filter(tenant_id=tenant_id)

    def create(self, **kwargs: Any) -> Any:
        if kwargs.get("tenant") is None and kwargs.get("tenant_id") is None:
            raise TenantScopeMissing(f"{self.model.__name__} rows are created inside a tenant")
        obj = self.model(**kwargs)
        obj.save(force_insert=True, using=self.db)
        return obj


class TenantOwnedModel(models.Model):
    """Abstract base for every tenant-owned row (STYLE.md habit 4).

    `objects` fails closed without a tenant. Django internals (admin, cascades, validate_unique)
    use the unscoped default manager, whose one greppable name is `unscoped_all_tenants`.
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")

    unscoped_all_tenants = models.Manager()
    objects = TenantScopedManager()

    class Meta:
        abstract = True
        default_manager_name = "unscoped_all_tenants"
        base_manager_name = "unscoped_all_tenants"


class ApiKeyKind(models.TextChoices):
    USER = "user", "user"
    AGENT = "agent", "agent"


class ApiKey(TenantOwnedModel):
    """A bearer API key. Only a SHA-256 digest of the secret is stored; the raw key is shown once."""

    prefix = models.CharField(max_length=16, unique=True, help_text="Public lookup part of the key.")
    secret_digest = models.CharField(max_length=64, editable=False)
    subject_id = models.CharField(
        max_length=64, unique=True, editable=False, help_text="Opaque, stable Subject id; never the key."
    )
    kind = models.CharField(max_length=8, choices=ApiKeyKind.choices, default=ApiKeyKind.USER)
    label = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta(TenantOwnedModel.Meta):
        ordering = ["-created_at"]
        verbose_name = "API key"

    def __str__(self) -> str:
        state = "revoked" if self.revoked_at else "active"
        return f"{self.tenant.slug}:{self.prefix} ({self.kind}, {state})"


class TenantBudget(models.Model):
    """A tenant's own budgets, where the operator overrides the host's defaults (settings
    `OPENWOP_TENANT_*`). One row per tenant at most; an empty field means the host default.
    Enforced before the work they bound (DESIGN.md §Many tenants, many days)."""

    tenant = models.OneToOneField(Tenant, on_delete=models.CASCADE, primary_key=True, related_name="budget")
    requests_per_minute = models.PositiveIntegerField(
        null=True, blank=True, help_text="Requests per minute over all of the tenant's keys; 0 = unlimited."
    )
    streams = models.PositiveIntegerField(
        null=True, blank=True, help_text="Streams open at once over all of the tenant's keys; 0 = unlimited."
    )
    runs_per_minute = models.PositiveIntegerField(
        null=True, blank=True, help_text="Runs accepted per minute; 0 = unlimited."
    )
    runs_queued = models.PositiveIntegerField(
        null=True, blank=True, help_text="Runs accepted and not yet finished nor waiting; 0 = unlimited."
    )
    runs_in_progress = models.PositiveIntegerField(
        null=True, blank=True, help_text="Runs a worker advances at once; 0 = unlimited."
    )
    api_keys = models.PositiveIntegerField(
        null=True, blank=True, help_text="Active (unrevoked) API keys; 0 = unlimited."
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "tenant budget"

    def __str__(self) -> str:
        return f"budget of {self.tenant_id}"
