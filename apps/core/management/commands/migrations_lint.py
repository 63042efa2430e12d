"""`manage.py migrations_lint`: every migration of apps/ against the rules of
docs/contributors/migrations.md (apps/core/migration_lint.py), the accepted exceptions read from
deploy/migration-exceptions.toml. Exit 1 on a finding that is not excepted or a stale exception."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.core.migration_lint import EXCEPTIONS_FILE, lint


class Command(BaseCommand):
    help = "Check every migration against the expand/contract rules; exceptions from deploy/migration-exceptions.toml."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--exceptions", type=Path, default=EXCEPTIONS_FILE, help="The exceptions file.")
        parser.add_argument("--show-excepted", action="store_true", help="Also print the excepted findings.")

    def handle(self, *args: Any, **options: Any) -> None:
        result = lint(exceptions_path=options["exceptions"])
        if options["show_excepted"]:
            for finding in result.excepted:
                self.stdout.write(f"excepted  {finding.line()}")
        for finding in result.findings:
            self.stderr.write(f"error     {finding.line()}")
        for problem in result.problems:
            self.stderr.write(f"error     {problem}")
        if not result.ok:
            raise CommandError(
                f"{len(result.findings) + len(result.problems)} migration rule error(s): "
                "docs/contributors/migrations.md says how to write each safely"
            )
        self.stdout.write(f"migrations lint: clean ({len(result.excepted)} accepted exceptions)")
