"""`console_member_create --tenant <slug> --username <name>`: a tenant console user.

The password comes from $OPENWOP_CONSOLE_PASSWORD or an interactive prompt, never the command line
(it would land in shell history and process listings)."""

from __future__ import annotations

import getpass
import os
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.console.services import membership_create
from apps.core.errors import ValidationFailed
from apps.tenants.models import Tenant


class Command(BaseCommand):
    help = "Create a tenant console user (or bind an existing non-staff user) for one tenant."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", required=True, help="tenant slug (must exist)")
        parser.add_argument("--username", required=True)

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = Tenant.objects.filter(slug=options["tenant"]).first()
        if tenant is None:
            raise CommandError(f"No tenant {options['tenant']!r}.")
        password = os.environ.get("OPENWOP_CONSOLE_PASSWORD") or getpass.getpass("Password: ")
        if not password:
            raise CommandError("A password is required.")
        try:
            membership = membership_create(tenant=tenant, username=options["username"], password=password)
        except ValidationFailed as exc:
            raise CommandError(exc.message) from exc
        self.stdout.write(f"console user {membership.user} of tenant {tenant.slug}")
