"""`facet_set --protocol a2a|mcp [--versions v1,v2] [--preferred v] [--minimum v [--at <ISO datetime>]]`:
the host facet from the command line, for operators who keep configuration as code (issue 24).

With `--at`, `--minimum` is a scheduled floor: it becomes the facet's floor at that instant, when
the beat job `facets.apply_scheduled_floors` applies it (`facet_floor_schedule`, audited too); the
other options still apply now. An ISO datetime without an offset is UTC.

The same service as the admin (`facets.services.facet_update`): the same validation, the same
audited `FacetChange` row (actor `cli:<os user>`, `as <text>` beside it with `--actor <text>`), the same
invalidation in every process. A refused change prints every field's message and exits with
status 2, changing nothing; an unchanged facet exits 0 and writes no audit row.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from apps.core.command_args import ACTOR_HELP, REFUSED_STATUS, actor_option, instant_option
from apps.core.errors import ValidationFailed
from apps.facets.services import facet_floor_schedule, facet_update


def refusal(exc: ValidationFailed) -> CommandError:
    fields = (exc.details or {}).get("fields") or {}
    lines = [f"{field}: {' '.join(messages)}" for field, messages in sorted(fields.items())]
    return CommandError("\n".join([exc.message, *lines]), returncode=REFUSED_STATUS)


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
        parser.add_argument("--at", help="with --minimum: the instant the floor takes effect (ISO 8601; UTC default)")
        parser.add_argument("--actor", help=ACTOR_HELP)

    def handle(self, *args: Any, **options: Any) -> None:
        changes: dict[str, Any] = {}
        if options["versions"] is not None:
            changes["versions"] = _versions(options["versions"])
        if options["preferred"] is not None:
            changes["preferred_version"] = options["preferred"]
        at = instant_option("--at", options["at"]) if options["at"] is not None else None
        if at is not None and options["minimum"] is None:
            raise CommandError("--at schedules a floor: give it with --minimum.", returncode=REFUSED_STATUS)
        if options["minimum"] is not None and at is None:
            changes["minimum_version"] = options["minimum"]
        if not changes and at is None:
            raise CommandError("Nothing to set: give --versions, --preferred or --minimum.", returncode=REFUSED_STATUS)
        actor = actor_option(options["actor"])
        try:
            # One transaction: a refused schedule leaves the immediate changes unmade too.
            with transaction.atomic():
                if changes:
                    facet = facet_update(protocol=options["protocol"], changes=changes, actor=actor)
                if at is not None:
                    facet = facet_floor_schedule(
                        protocol=options["protocol"], minimum=options["minimum"], at=at, actor=actor
                    )
        except ValidationFailed as exc:
            raise refusal(exc) from exc
        line = (
            f"{facet.protocol}: versions {', '.join(facet.versions)}; preferred {facet.preferred_version}; "
            f"minimum {facet.minimum_version}"
        )
        if facet.scheduled_at is not None:
            line += f"; minimum {facet.scheduled_minimum_version} from {facet.scheduled_at.isoformat()}"
        self.stdout.write(line)
