"""`create_api_key --tenant <slug> [--kind user|agent]`: prints the raw key alone on stdout."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.core.command_args import REFUSED_STATUS
from apps.core.errors import RateLimited, ValidationFailed
from apps.tenants.models import ApiKeyKind
from apps.tenants.services import api_key_create, tenant_get_or_create


class Command(BaseCommand):
    help = "Create an API key for a tenant (creating the tenant if missing); prints only the key."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", required=True, help="tenant slug")
        parser.add_argument("--kind", choices=ApiKeyKind.values, default=ApiKeyKind.USER)
        parser.add_argument("--label", default="")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            tenant, created = tenant_get_or_create(slug=options["tenant"])
        except ValidationFailed as exc:
            raise CommandError(exc.message) from exc
        try:
            _, raw = api_key_create(tenant=tenant, kind=options["kind"], label=options["label"])
        except RateLimited as exc:  # the tenant's api_keys budget (manage.py tenant_budget)
            raise CommandError(exc.message, returncode=REFUSED_STATUS) from None
        if created:
            self.stderr.write(f"created tenant {tenant.slug}")
        self.stdout.write(raw)
