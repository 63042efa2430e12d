"""`audit_verify [--tenant <slug>]`: prove the records' hash chain (issue 36 item 4).

Walks every (tenant, subject) stream in sequence order, recomputing each record's digest from its
predecessor's, its sequence and its content (apps/audit/chain.py), from where its expired records
end to the stream's head. Exits 0 when every stream is intact; otherwise prints, for each broken
stream, the first sequence that is altered or missing, and exits 1. An unknown tenant exits 2.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.audit.chain import chain_verify
from apps.core.command_args import REFUSED_STATUS
from apps.tenants.models import Tenant

BROKEN_STATUS = 1


class Command(BaseCommand):
    help = "Verify the hash chain of the host's records; exit 1 naming the first altered or missing sequence."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", help="only this tenant's streams (its slug)")

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = None
        if options["tenant"]:
            tenant = Tenant.objects.filter(slug=options["tenant"]).first()
            if tenant is None:
                raise CommandError(f"no tenant {options['tenant']!r}", returncode=REFUSED_STATUS)
        report = chain_verify(tenant=tenant)
        for broken in report.breaks:
            self.stderr.write(str(broken))
        if not report.intact:
            raise CommandError(
                f"{len(report.breaks)} of {report.streams} streams broken ({report.records} records read)",
                returncode=BROKEN_STATUS,
            )
        self.stdout.write(f"intact: {report.records} records in {report.streams} streams")
