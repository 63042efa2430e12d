"""`api_key list --tenant <slug>` and `api_key revoke <prefix> [--tenant <slug>]`: what the admin's
API key page does, for an operator's shell (rotation: docs/operators/secrets-and-rotation.md).

`list` prints one key per line: prefix, kind, state, created, label; never a secret (only its
digest is stored). `revoke` revokes one key by its prefix (the `owk_<prefix>.` part of the key);
the next request with it gets 401 in every process. With `--tenant`, a key of another tenant is
refused as if it did not exist. A new key: `create_api_key --tenant <slug>`.
Exit 0 done (revoking a revoked key changes nothing), 2 refused (no such tenant or key).
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.core.command_args import REFUSED_STATUS
from apps.tenants.models import ApiKey, Tenant
from apps.tenants.services import api_key_revoke


def _printable(text: str) -> str:
    return "".join(c if c.isprintable() and c != "\t" else repr(c)[1:-1] for c in text)


class Command(BaseCommand):
    help = "List a tenant's API keys, or revoke one by its prefix."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        listing = actions.add_parser("list", help="a tenant's keys: prefix, kind, state, created, label")
        listing.add_argument("--tenant", required=True, help="tenant slug")
        revoke = actions.add_parser("revoke", help="revoke one key (the next request with it is refused)")
        revoke.add_argument("prefix", help="the key's prefix: owk_<prefix>.<secret>")
        revoke.add_argument("--tenant", help="refuse unless the key is this tenant's")

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = None
        if options.get("tenant"):
            tenant = Tenant.objects.filter(slug=options["tenant"]).first()
            if tenant is None:
                raise CommandError(f"no tenant {options['tenant']!r}", returncode=REFUSED_STATUS)
        if options["action"] == "list":
            assert tenant is not None
            for key in ApiKey.objects.for_tenant(tenant).order_by("created_at", "id"):
                state = f"revoked {key.revoked_at.isoformat()}" if key.revoked_at else "active"
                self.stdout.write(
                    "\t".join([key.prefix, key.kind, state, key.created_at.isoformat(), _printable(key.label)])
                )
            return
        keys = ApiKey.unscoped_all_tenants.select_related("tenant").filter(prefix=options["prefix"])
        if tenant is not None:
            keys = keys.filter(tenant=tenant)
        key = keys.first()
        if key is None:
            raise CommandError(f"no API key {options['prefix']!r}" + (f" in tenant {tenant.slug!r}" if tenant else ""),
                               returncode=REFUSED_STATUS)  # fmt: skip
        already = key.revoked_at is not None
        api_key_revoke(api_key=key)
        self.stdout.write(f"{key.prefix} ({key.tenant.slug}) {'was already revoked' if already else 'revoked'}")
