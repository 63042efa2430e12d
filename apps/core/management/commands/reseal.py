"""`reseal`: every stored sealed value re-sealed under the current DJANGO_SECRET_KEY.

A value only a key of DJANGO_SECRET_KEY_FALLBACKS opens is sealed again under DJANGO_SECRET_KEY;
one the current key opens is left as it is (so a second run changes nothing). First, every value
still derived from the key that peers hold (an agent's a2aTenant not stored yet) is stored, so
the key's next change cannot move it. Rows go in batches of `--batch`, each its own short
transaction. Prints the counts per kind. Exit 0 when everything opens; 2 naming each value no key
opens (kind, tenant, id: never the value), after re-sealing all the others.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.core.command_args import REFUSED_STATUS
from apps.core.sealing import Unopenable, sealed_field_reseal, sealed_fields, secret_bound_values


class Command(BaseCommand):
    help = "Re-seal every stored secret under the current DJANGO_SECRET_KEY (then a fallback key can go)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--batch", type=int, default=200, help="rows per transaction (default 200)")

    def handle(self, *args: Any, **options: Any) -> None:
        batch = max(1, int(options["batch"]))
        for bound in secret_bound_values():
            stored = 0
            while done := bound.store(batch):
                stored += done
            left = bound.pending()
            self.stdout.write(f"{bound.kind}: {stored} stored" + (f", {left} left (locked; run again)" if left else ""))
        unopenable: list[Unopenable] = []
        for field in sealed_fields():
            count, failed = sealed_field_reseal(field, batch=batch)
            unopenable += failed
            self.stdout.write(
                f"{field.kind}: {count.resealed} resealed, {count.current} already current, "
                f"{count.unopenable} cannot be opened"
            )
        if unopenable:
            for value in unopenable:
                self.stderr.write(str(value))
            raise CommandError(
                f"{len(unopenable)} stored values open under no key of DJANGO_SECRET_KEY and "
                "DJANGO_SECRET_KEY_FALLBACKS (listed above: kind, tenant, id); everything else is resealed",
                returncode=REFUSED_STATUS,
            )
