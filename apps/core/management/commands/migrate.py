"""`manage.py migrate`, every migration under a lock timeout with retries (apps/core/migration_locks.py;
docs/contributors/migrations.md). Everything else is Django's own command."""

from __future__ import annotations

from typing import Any

from django.core.management.commands.migrate import Command as DjangoMigrate

from apps.core.migration_locks import migrating_under_lock_timeout


class Command(DjangoMigrate):
    help = DjangoMigrate.help + (
        " Each migration takes its locks within OPENWOP_MIGRATE_LOCK_TIMEOUT seconds, retried"
        " OPENWOP_MIGRATE_LOCK_RETRIES times, so the previous release keeps serving while it runs."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        with migrating_under_lock_timeout(options["database"]):
            super().handle(*args, **options)
