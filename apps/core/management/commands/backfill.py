"""`manage.py backfill`: list the post-deploy backfills and their progress, or run them to the end
(apps/core/backfills.py; docs/operators/upgrading.md)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.core.backfills import backfill_progress, backfill_run, backfills_pending, backfills_registered


class Command(BaseCommand):
    help = "List the post-deploy backfills (--list) or run them, pending ones by default, to the end."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("names", nargs="*", help="Backfills to run (default: every pending one).")
        parser.add_argument("--list", action="store_true", help="Print each backfill's progress and exit.")
        parser.add_argument("--batch-size", type=int, default=None, help="Rows per batch (OPENWOP_BACKFILL_BATCH).")
        parser.add_argument("--duty", type=float, default=None, help="Share of time at work (OPENWOP_BACKFILL_DUTY).")
        parser.add_argument("--seconds", type=float, default=None, help="Stop after about this long (resumable).")

    def handle(self, *args: Any, **options: Any) -> None:
        registered = {backfill.name: backfill for backfill in backfills_registered()}
        if options["list"]:
            if not registered:
                self.stdout.write("no backfills in this release")
            for name, backfill in registered.items():
                progress = backfill_progress(name=name)
                state = "not started" if progress is None else "done" if progress.done_at else "pending"
                rows = progress.rows if progress is not None else 0
                self.stdout.write(f"{name}: {state}, {rows} rows — {backfill.description}")
            return
        unknown = [name for name in options["names"] if name not in registered]
        if unknown:
            raise CommandError(f"no backfill named {', '.join(unknown)} (manage.py backfill --list)")
        names = options["names"] or [backfill.name for backfill in backfills_pending()]
        if not names:
            self.stdout.write("no backfill pending")
        for name in names:
            report = backfill_run(
                name=name, batch_size=options["batch_size"], seconds=options["seconds"], duty=options["duty"]
            )
            self.stdout.write(report.line())
            if report.busy:
                raise CommandError(f"backfill {name} is being run by another process (the beat job?)")
