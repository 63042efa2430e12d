"""`seed_demo`: idempotent demo data. Tenant creation hooks seed each app's per-tenant fixtures."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from apps.tenants.hooks import run_tenant_created_hooks
from apps.tenants.services import tenant_get_or_create

DEMO_TENANTS = ("demo",)


class Command(BaseCommand):
    help = "Create the demo tenant and its fixtures; safe to run any number of times."

    def handle(self, *args: Any, **options: Any) -> None:
        for slug in DEMO_TENANTS:
            tenant, created = tenant_get_or_create(slug=slug, name="Demo tenant")
            if not created:
                run_tenant_created_hooks(tenant.pk)  # hooks are idempotent: re-seed what is missing
            self.stdout.write(f"tenant {tenant.slug}: {'created' if created else 'present'}")
