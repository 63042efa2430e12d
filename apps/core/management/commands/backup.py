"""`backup --to <dir>`: the database dumped by the server's own pg_dump, with a manifest.

The folder must be new or empty; it is made 0700 and its files 0600. Exit 0 with a summary, 2 when
refused before anything was written (no matching pg_dump: it says what to install; a folder that
is not empty), 1 when pg_dump failed (the partial dump is deleted).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.core.backups import BackupFailed, BackupRefused, backup_write
from apps.core.command_args import REFUSED_STATUS


class Command(BaseCommand):
    help = "Back up the database (pg_dump of the server's own version) and a manifest into a new folder."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--to", required=True, type=Path, help="a new or empty folder")

    def handle(self, *args: Any, **options: Any) -> None:
        folder: Path = options["to"]
        try:
            manifest = backup_write(to=folder)
        except BackupFailed as exc:
            raise CommandError(exc.message, returncode=1) from None
        except BackupRefused as exc:
            raise CommandError(exc.message, returncode=REFUSED_STATUS) from None
        dump = manifest["dump"]
        self.stdout.write(
            f"backup written to {folder}: {dump['file']} ({dump['size']} bytes, sha256 {dump['sha256']}), "
            f"PostgreSQL {manifest['server']['version']} by pg_dump {dump['pgDumpVersion']}, host "
            f"{manifest['hostVersion']}, {len(manifest['migrations'])} migrations applied"
        )
        self.stdout.write(
            "keep apart from it: DJANGO_SECRET_KEY and DJANGO_SECRET_KEY_FALLBACKS (sealed secrets open only "
            "with them) and the record archive"
        )
