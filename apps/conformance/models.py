"""The audit trail of the conformance profile: every apply and every clear that changed the host."""

from __future__ import annotations

from typing import Any

from django.db import models


class ProfileAction(models.TextChoices):
    APPLY = "apply", "apply"
    CLEAR = "clear", "clear"


class ProfileChangeRefused(RuntimeError):
    """An attempt to edit or delete an audit row (STYLE.md habit 6: audit tables are append-only)."""


class ProfileChange(models.Model):
    """One apply or clear of the conformance profile: who, which tenants, and what the host's
    routing choice was before (so clear puts back exactly that). Never a key: only key prefixes.
    Append-only (trigger in migration 0001); the newest row says whether the profile is applied."""

    actor = models.CharField(max_length=200, help_text="Who: the operator's login, or the script.")
    action = models.CharField(max_length=8, choices=ProfileAction.choices)
    tenant = models.CharField(max_length=128, help_text="The suite's tenant (OPENWOP_API_KEY's).")
    tenant_b = models.CharField(max_length=128, help_text="The second tenant (OPENWOP_TEST_TENANT_B_API_KEY's).")
    pinned_before = models.CharField(
        max_length=128, blank=True, default="", help_text="The skill the host routed alone before apply ('' = all)."
    )
    details = models.JSONField(default=dict, help_text="Bindings, agents, key prefixes (never a key).")
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"{self.action} ({self.tenant}, {self.tenant_b}) by {self.actor}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise ProfileChangeRefused("conformance profile changes are append-only")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise ProfileChangeRefused("conformance profile changes are append-only")
