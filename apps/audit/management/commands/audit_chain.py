"""`audit_chain [--tenant <slug>]`: link the records written without digests into their streams'
chains now (apps/audit/chainer.py), as the beat job `audit-chain-pending` does every minute.

After an upgrade from a release that wrote records without the chain (or whose records were never
chained: migration 0008 no longer does it inside `migrate`), this is the backfill: batched, each
batch its own short transaction, resumable (a second run starts where the first stopped), its
progress in the log and, per stream, on stdout. Exits 0 when every stream is chained to its head,
1 when some are still behind (busy, or a gap nothing can be linked across: `audit_verify` names
it), 2 for an unknown tenant.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.audit.chainer import chain_pending
from apps.core.command_args import REFUSED_STATUS
from apps.tenants.models import Tenant


class Command(BaseCommand):
    help = "Link records written without digests into their streams' hash chains (batched, resumable)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", help="only this tenant's streams (its slug)")

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = None
        if options["tenant"]:
            tenant = Tenant.objects.filter(slug=options["tenant"]).first()
            if tenant is None:
                raise CommandError(f"no tenant {options['tenant']!r}", returncode=REFUSED_STATUS)
        run = chain_pending(tenant=tenant)
        for line in run.lines():
            self.stdout.write(line)
        if run.behind:
            raise CommandError(f"{len(run.behind)} streams still behind ({run.linked} records linked)")
        self.stdout.write(f"chained: {run.linked} records linked in {len(run.streams)} streams")
