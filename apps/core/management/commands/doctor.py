"""`doctor secrets`: every stored value that no longer opens, and what still depends on the key.

Lists each sealed value no key of DJANGO_SECRET_KEY and DJANGO_SECRET_KEY_FALLBACKS opens, one per
line: kind, tenant (`(host)` for host-wide rows), id; never the value, sealed or clear. Then how
many open only under a fallback (`manage.py reseal` moves them to the current key) and how many
values peers hold are not stored yet (they would change with the key). Exit 0 when every value
opens, 1 when any does not.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.core.sealing import seal_state, sealed_fields, sealed_values_unopenable, secret_bound_values

BROKEN_STATUS = 1


def _fallback_only() -> int:
    count = 0
    for field in sealed_fields():
        for value in field.rows().values_list(field.field, flat=True).iterator(chunk_size=500):
            if value and seal_state(field.token_of(value), purpose=field.purpose) == "fallback":
                count += 1
    return count


class Command(BaseCommand):
    help = "Check the host: `doctor secrets` lists every stored secret that no longer opens."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("topic", choices=["secrets"], help="what to check")

    def handle(self, *args: Any, **options: Any) -> None:
        broken = 0
        for value in sealed_values_unopenable():
            self.stdout.write(str(value))
            broken += 1
        kinds = ", ".join(field.kind for field in sealed_fields())
        fallback = _fallback_only()
        if fallback:
            self.stdout.write(f"{fallback} values open only under DJANGO_SECRET_KEY_FALLBACKS: run manage.py reseal")
        for bound in secret_bound_values():
            if pending := bound.pending():
                self.stdout.write(
                    f"{bound.kind}: {pending} not stored yet (derived from DJANGO_SECRET_KEY): run manage.py reseal "
                    "before changing the key"
                )
        if broken:
            raise CommandError(
                f"{broken} stored values open under no key of DJANGO_SECRET_KEY and DJANGO_SECRET_KEY_FALLBACKS "
                "(kind, tenant, id above)",
                returncode=BROKEN_STATUS,
            )
        self.stdout.write(f"every stored secret opens ({kinds})")
