"""The run event log is append-only in the database too (STYLE.md habit 6)."""

from django.db import migrations

from apps.core.append_only import append_only_trigger


class Migration(migrations.Migration):
    dependencies = [("runs", "0001_initial")]

    operations = [append_only_trigger("runs_runevent")]
