"""The records' append-only trigger lets the retention job's batch deletes through (issue 36): a
DELETE passes only inside a transaction that set `openwop.retention_expiry` locally
(apps/core/append_only.py), as the run log's does. Expiry no longer disables the trigger, which
took a lock on the whole partition for the batch."""

from django.db import migrations

from apps.core.append_only import on_postgresql, refuse_change_function


class Migration(migrations.Migration):
    dependencies = [("audit", "0010_hostevent_partitioned")]

    operations = [
        migrations.RunPython(
            on_postgresql([refuse_change_function("audit_hostevent", expirable=True)]),
            on_postgresql([refuse_change_function("audit_hostevent")]),
            elidable=False,
        ),
    ]
