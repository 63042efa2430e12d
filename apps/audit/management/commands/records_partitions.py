"""`records_partitions show`, `records_partitions ensure`, `records_partitions repair` (issue 51 item 4).

`show` prints the record partitions (first and last, how many) and what the default partition
holds, interval by interval: records land there only when no partition covers their instant (the
beat job stopped for longer than OPENWOP_RECORDS_PARTITIONS_AHEAD_DAYS). `ensure` creates the
partitions ahead now, as the retention job does. `repair` moves the default partition's records
into their own partitions (apps/audit/partitions.py `records_default_repair`: every record as it
was, the chain and the rollups unchanged), except the interval the doors are still writing into,
which it names (run it again once that interval has ended). Exit status: 0 when the default
partition is empty afterwards, 1 when records are left in it (a live or busy interval).
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from apps.audit.partitions import default_ranges, partitions, records_default_repair, records_partitions_ensure

LEFT_STATUS = 1


class Command(BaseCommand):
    help = "Show the record partitions, create them ahead, or move the default partition's records into theirs."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=["show", "ensure", "repair"])

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        if action == "ensure":
            created = records_partitions_ensure(timezone.now())
            self.stdout.write(f"partitions created ahead: {', '.join(created) or 'none'}")
        elif action == "repair":
            repair = records_default_repair(timezone.now())
            for name, count in repair.moved.items():
                self.stdout.write(f"{name}: {count} records moved from the default partition")
            for name in repair.live:
                self.stdout.write(f"{name}: still being written, left in the default partition (repair after it ends)")
            for name in repair.busy:
                self.stdout.write(f"{name}: the default partition was busy, left (run repair again)")
            self.stdout.write(f"default partition: {repair.left} records left")
            if repair.left:
                raise CommandError(f"{repair.left} records left in the default partition", returncode=LEFT_STATUS)
            return
        parts = partitions()
        if parts:
            self.stdout.write(
                f"{len(parts)} partitions, {parts[0].name} to {parts[-1].name} (until {parts[-1].upper:%Y-%m-%d})"
            )
        ranges = default_ranges()
        for floor, count in ranges:
            self.stdout.write(f"default partition: {count} records from {floor:%Y-%m-%d}")
        self.stdout.write(f"default partition: {sum(count for _floor, count in ranges)} records")
