"""`facet_set --protocol a2a|mcp [--versions v1,v2] [--preferred v] [--minimum v]`: the host facet
from the command line, for operators who keep configuration as code (issue 24).

The same service as the admin (`facets.services.facet_update`): the same validation, the same
audited `FacetChange` row (actor `cli:<login>` unless `--actor` says otherwise), the same
invalidation in every process. A refused change prints every field's message and exits with
status 2, changing nothing; an unchanged facet exits 0 and writes no audit row.
"""

from __future__ import annotations

import getpass
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.core.errors import ValidationFailed
from apps.facets.services import facet_update

REFUSED_STATUS = 2


def _versions(value: str) -> list[str]:
    versions = [version.strip() for version in value.split(",")]
    if not all(versions):
        raise CommandError("--versions is a comma-separated list of versions, none empty.", returncode=REFUSED_STATUS)
    return versions


class Command(BaseCommand):
    help = "Set the offered versions, preferred version and floor of the a2a or mcp facet (audited)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--protocol", required=True, choices=["a2a", "mcp"])
        parser.add_argument(
            "--versions", help="the offered versions, comma-separated (e.g. 1.0 or 2026-07-28,2025-11-25)"
        )
        parser.add_argument("--preferred", help="the preferred version (one of the offered)")
        parser.add_argument("--minimum", help="the floor: the oldest version still accepted")
        parser.add_argument("--actor", help="who, for the audit row (default cli:<login>)")

    def handle(self, *args: Any, **options: Any) -> None:
        changes: dict[str, Any] = {}
        if options["versions"] is not None:
            changes["versions"] = _versions(options["versions"])
        if options["preferred"] is not None:
            changes["preferred_version"] = options["preferred"]
        if options["minimum"] is not None:
            changes["minimum_version"] = options["minimum"]
        if not changes:
            raise CommandError("Nothing to set: give --versions, --preferred or --minimum.", returncode=REFUSED_STATUS)
        actor = options["actor"] or f"cli:{getpass.getuser()}"
        try:
            facet = facet_update(protocol=options["protocol"], changes=changes, actor=actor)
        except ValidationFailed as exc:
            fields = (exc.details or {}).get("fields") or {}
            lines = [f"{field}: {' '.join(messages)}" for field, messages in sorted(fields.items())]
            raise CommandError("\n".join([exc.message, *lines]), returncode=REFUSED_STATUS) from exc
        self.stdout.write(
            f"{facet.protocol}: versions {', '.join(facet.versions)}; preferred {facet.preferred_version}; "
            f"minimum {facet.minimum_version}"
        )
