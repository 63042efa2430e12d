"""`console_member_create --tenant <slug> --username <name>`: a tenant console user.

The password comes from $OPENWOP_CONSOLE_PASSWORD or, on a terminal, a prompt that asks twice
(like Django's `createsuperuser`: a mismatch or a blank one is said and asked again, at most
PROMPT_TRIES times); never the command line (it would land in shell history and process listings).
Without the variable and without a terminal it refuses, saying which variable to set."""

from __future__ import annotations

import getpass
import os
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.console.services import membership_create
from apps.core.errors import ValidationFailed
from apps.tenants.models import Tenant

PROMPT_TRIES = 3


class Command(BaseCommand):
    help = "Create a tenant console user (or bind an existing non-staff user) for one tenant."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", required=True, help="tenant slug (must exist)")
        parser.add_argument("--username", required=True)

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = Tenant.objects.filter(slug=options["tenant"]).first()
        if tenant is None:
            raise CommandError(f"No tenant {options['tenant']!r}.")
        password = os.environ.get("OPENWOP_CONSOLE_PASSWORD") or self._prompted()
        try:
            membership = membership_create(tenant=tenant, username=options["username"], password=password)
        except ValidationFailed as exc:
            raise CommandError(exc.message) from exc
        self.stdout.write(f"console user {membership.user} of tenant {tenant.slug}")

    def _prompted(self) -> str:
        """The password typed twice on the terminal, the same both times and not blank."""
        if not sys.stdin.isatty():
            raise CommandError("No terminal to ask for the password on: set OPENWOP_CONSOLE_PASSWORD.")
        for _ in range(PROMPT_TRIES):
            password = getpass.getpass("Password: ")
            if not password:
                self.stderr.write("Error: Blank passwords aren't allowed.")
                continue
            if getpass.getpass("Password (again): ") != password:
                self.stderr.write("Error: Your passwords didn't match.")
                continue
            return password
        raise CommandError(f"No password after {PROMPT_TRIES} tries: nothing was created.")
