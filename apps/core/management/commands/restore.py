"""`restore --from <dir>`: a backup of `manage.py backup` restored into this host's empty database.

Checks before anything is written: the manifest, the dump's size and SHA-256, that this release
has every migration the dump has, that the database is empty, that the server is at least the
dumped one's major version and that its own pg_restore is here. The restore is one transaction.
Then, when the dump is of this release's schema, every sealed value is tried under
DJANGO_SECRET_KEY and its fallbacks.

Exit 0 restored (and every sealed value opens); 1 restored, but sealed values do not open (the
secret key is not the backed-up host's) or pg_restore failed (the database is left empty); 2
refused, nothing written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.core.backups import BackupFailed, BackupRefused, restore_run
from apps.core.command_args import REFUSED_STATUS
from apps.core.sealing import sealed_values_unopenable


class Command(BaseCommand):
    help = "Restore a backup made by manage.py backup into this host's (empty) database."
    # The database is empty until the restore: nothing may look at it before.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--from", dest="source", required=True, type=Path, help="the backup's folder")

    def handle(self, *args: Any, **options: Any) -> None:
        source: Path = options["source"]
        try:
            restored = restore_run(source=source)
        except BackupFailed as exc:
            raise CommandError(exc.message, returncode=1) from None
        except BackupRefused as exc:
            raise CommandError(exc.message, returncode=REFUSED_STATUS) from None
        manifest = restored.manifest
        self.stdout.write(
            f"restored {source} (host {manifest['hostVersion']}, {manifest['createdAt']}, "
            f"{len(manifest['migrations'])} migrations)"
        )
        if restored.pending_migrations:
            self.stdout.write(
                f"{len(restored.pending_migrations)} migrations of this release are not applied yet: run "
                "manage.py migrate, then manage.py doctor secrets"
            )
            return
        unopenable = sum(1 for _ in sealed_values_unopenable())
        if unopenable:
            raise CommandError(
                f"restored, but {unopenable} sealed values do not open under DJANGO_SECRET_KEY and "
                "DJANGO_SECRET_KEY_FALLBACKS: set the backed-up host's key (manage.py doctor secrets lists them)",
                returncode=1,
            )
        self.stdout.write("every sealed value opens under DJANGO_SECRET_KEY and its fallbacks")
