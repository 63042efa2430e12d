"""`audit_export --tenant <slug> [--since <instant>] --until <instant> [--to <url>]`: export a
tenant's records on demand (issue 36 item 3).

The same export as `retention apply` makes before records expire (`apps.audit.archive.export_range`):
gzip'd JSON Lines plus a manifest under `--to` (`file:///dir` or `s3://bucket/prefix`; default
OPENWOP_ARCHIVE_URL), recorded so the auditors' page links it. Instants are ISO 8601; without an
offset they are UTC. Without `--since` the export starts at the tenant's first record. Prints the
manifest's URL, then the count and the file's SHA-256. A refusal (unknown tenant, bad range or
URL, no archive) exits 2 and writes nothing; an archive that fails the write exits 1.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.audit.archive import ArchiveUnavailable, export_range
from apps.core.command_args import REFUSED_STATUS, instant_option
from apps.core.errors import ValidationFailed
from apps.tenants.models import Tenant


class Command(BaseCommand):
    help = "Export a tenant's records of a time range (gzip'd JSON Lines + manifest) to the archive."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", required=True, help="tenant slug")
        parser.add_argument("--since", help="first instant, inclusive (ISO 8601; default: the first record)")
        parser.add_argument("--until", required=True, help="end instant, exclusive (ISO 8601), not in the future")
        parser.add_argument("--to", help="file:///dir or s3://bucket/prefix (default OPENWOP_ARCHIVE_URL)")

    def handle(self, *args: Any, **options: Any) -> None:
        since = instant_option("--since", options["since"]) if options["since"] else None
        until = instant_option("--until", options["until"])
        tenant = Tenant.objects.filter(slug=options["tenant"]).first()
        if tenant is None:
            raise CommandError(f"No tenant {options['tenant']!r}.", returncode=REFUSED_STATUS)
        try:
            export = export_range(tenant=tenant, since=since, until=until, to_url=options["to"])
        except ValidationFailed as exc:
            raise CommandError(exc.message, returncode=REFUSED_STATUS) from exc
        except ArchiveUnavailable as exc:
            raise CommandError(str(exc)) from exc  # not a refusal: the same export may succeed later
        self.stdout.write(export.manifest_url)
        self.stderr.write(f"{export.count} records, {export.size} bytes, sha256 {export.sha256}")
