"""Who may use the tenant console: a Django user bound to exactly one tenant."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from apps.tenants.models import Tenant


class TenantMembership(models.Model):
    """One console user, one tenant (one-to-one on the user: a console user never switches tenant,
    so every page is scoped by this row alone). Operators create memberships in the admin or with
    `manage.py console_member_create`; staff without a membership cannot use the console."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="tenant_membership")
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="memberships")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["tenant__slug", "user__username"]

    def __str__(self) -> str:
        return f"{self.user} @ {self.tenant.slug}"
