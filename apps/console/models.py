"""Who may use the tenant console: a Django user bound to exactly one tenant; and the audit of
sign-ins the throttle refused (the admin's and the console's, apps/console/login_throttle.py)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone

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


class SignInRefusalChange(RuntimeError):
    """An attempt to edit or delete a sign-in refusal (STYLE.md habit 6: audit rows are append-only)."""


class SignInDoor(models.TextChoices):
    ADMIN = "admin", "admin (staff)"
    CONSOLE = "console", "console"


class SignInRefusal(models.Model):
    """A sign-in refused by the throttle without checking the password: the first refusal of one
    username + address window (the later ones are only counted in /metrics). Append-only: on
    PostgreSQL a trigger refuses UPDATE and DELETE (migration 0002)."""

    door = models.CharField(max_length=16, choices=SignInDoor.choices)
    username = models.CharField(max_length=150, help_text="As entered, stripped and NFKC-normalized.")
    address = models.CharField(max_length=64, help_text="The client address (IPv6: its /64).")
    at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-at"]

    def __str__(self) -> str:
        return f"{self.door} sign-in of {self.username!r} from {self.address} refused at {self.at:%Y-%m-%d %H:%M:%S}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise SignInRefusalChange("sign-in refusals are append-only")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise SignInRefusalChange("sign-in refusals are append-only")
