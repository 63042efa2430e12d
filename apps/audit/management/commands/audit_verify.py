"""`audit_verify [--tenant <slug>] [--against <archive url>]`: prove the records' hash chain;
`audit_verify --reanchor --tenant <slug> --reason "..."`: re-anchor its broken streams.

Verify walks every (tenant, subject) stream in sequence order, recomputing each record's digest
from its predecessor's, its sequence and its content (apps/audit/verify.py says every check). With
an archive (`--against file:///dir` or `s3://bucket/prefix`, default OPENWOP_ARCHIVE_URL) the
anchors and chain heads are checked against the manifests read from the archive itself. It prints
every re-anchor ever made ("re-anchored at sequence N on <date> by <actor>: <reason>"), the records
not yet chained, and which streams it could check outside the database and which only inside;
then, for each broken stream, the first sequence a check does not prove. Exit status: 0 intact, 1
broken, 2 refused (an unknown tenant, a re-anchor without a reason or with nothing to re-anchor),
3 the archive could not be read (nothing was concluded).

`--reanchor` is the one way to make a broken stream verify again, and an explicit, audited act:
for each broken stream of the tenant (or only `--subject`) it appends a record of type
`openwop-host.chain-reanchored` to the stream itself, naming the operator (`cli:<login>`), the
reason and the first break it accepts; then it verifies again and reports as above.
"""

from __future__ import annotations

import getpass
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.audit.archive import ArchiveUnavailable
from apps.audit.chainer import chain_reanchor
from apps.audit.metrics import VERIFY_JOB
from apps.audit.models import HostEventStream
from apps.audit.verify import ChainBreak, ChainReport, chain_verify, printable
from apps.core.command_args import REFUSED_STATUS
from apps.core.errors import ValidationFailed
from apps.core.jobs import job_succeeded
from apps.tenants.models import Tenant

BROKEN_STATUS = 1
UNREADABLE_STATUS = 3
REASON_MAX = 1000


class Command(BaseCommand):
    help = "Verify the hash chain of the host's records; exit 1 naming the first altered or missing sequence."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", help="only this tenant's streams (its slug)")
        parser.add_argument(
            "--against", help="the archive to check anchors and heads against (default OPENWOP_ARCHIVE_URL)"
        )
        parser.add_argument("--reanchor", action="store_true", help="re-anchor the tenant's broken streams (audited)")
        parser.add_argument("--subject", help="--reanchor: only this stream (its subject id)")
        parser.add_argument("--reason", help="--reanchor: why (recorded in the stream, reported ever after)")

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = None
        if options["tenant"]:
            tenant = Tenant.objects.filter(slug=options["tenant"]).first()
            if tenant is None:
                raise CommandError(f"no tenant {printable(options['tenant'])!r}", returncode=REFUSED_STATUS)
        against = options["against"] or settings.OPENWOP_ARCHIVE_URL
        if options["reanchor"]:
            if tenant is None:
                raise CommandError("--reanchor needs --tenant <slug>.", returncode=REFUSED_STATUS)
            reason = (options["reason"] or "").strip()
            if not reason or len(reason) > REASON_MAX:
                raise CommandError(
                    f'--reanchor needs --reason "..." (1 to {REASON_MAX} characters): it is recorded in the stream.',
                    returncode=REFUSED_STATUS,
                )
            self._reanchor(tenant, against, reason, options["subject"])
        report = self._verify(tenant, against)
        if tenant is None:  # every tenant's streams: /metrics' last verified head (apps/audit/metrics.py)
            job_succeeded(VERIFY_JOB, {
                "records": report.records, "streams": report.streams, "broken_streams": report.broken_streams,
            })  # fmt: skip
        self._print(report)

    def _verify(self, tenant: Tenant | None, against: str) -> ChainReport:
        try:
            return chain_verify(tenant=tenant, against=against)
        except ValidationFailed as exc:  # a malformed archive URL
            raise CommandError(exc.message, returncode=REFUSED_STATUS) from exc
        except ArchiveUnavailable as exc:
            raise CommandError(f"could not check against the archive: {exc}", returncode=UNREADABLE_STATUS) from exc

    def _reanchor(self, tenant: Tenant, against: str, reason: str, subject_id: str | None) -> None:
        report = self._verify(tenant, against)
        first: dict[str, ChainBreak] = {}
        for broken in sorted(report.breaks, key=lambda b: b.sequence):
            first.setdefault(broken.subject_id, broken)
        if subject_id is not None:
            first = {subject_id: first[subject_id]} if subject_id in first else {}
        if not first:
            raise CommandError(
                f"nothing to re-anchor: every stream of {tenant.slug}"
                f"{'' if subject_id is None else ' ' + repr(printable(subject_id))} verifies.",
                returncode=REFUSED_STATUS,
            )
        actor = f"cli:{getpass.getuser()}"
        for stream, broken in first.items():
            try:
                event = chain_reanchor(
                    tenant=tenant, subject_id=stream, reason=reason, actor=actor,
                    broken_at=broken.sequence, problem=broken.problem,
                )  # fmt: skip
            except HostEventStream.DoesNotExist:  # records whose counter is gone: no stream to go on
                self.stderr.write(f"{tenant.slug} {printable(stream)}: no stream counter, not re-anchored")
                continue
            self.stdout.write(f"{tenant.slug} {printable(stream)}: re-anchor record at sequence {event.sequence}")

    def _print(self, report: ChainReport) -> None:
        for reanchor in report.reanchors:
            self.stdout.write(str(reanchor))
        for pending in report.pending:
            self.stdout.write(str(pending))
        for line in report.evidence_lines():
            self.stdout.write(line)
        for broken in report.breaks:
            self.stderr.write(str(broken))
        if not report.intact:
            raise CommandError(
                f"{report.broken_streams} of {report.streams} streams broken ({report.records} records read)",
                returncode=BROKEN_STATUS,
            )
        self.stdout.write(f"intact: {report.records} records in {report.streams} streams")
