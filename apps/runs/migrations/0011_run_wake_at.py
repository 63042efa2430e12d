"""`Run.wake_at`: the earliest a worker may claim a run (a parked run's wake-up time).

Safe while the previous release serves: a constant database default, so PostgreSQL adds the
column without rewriting the table, and the previous release's INSERTs (which do not name it)
write rows that are due at once. Reversible: the column is dropped.
"""

import datetime

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('runs', '0010_fewer_run_indexes'),
    ]

    operations = [
        migrations.AddField(
            model_name='run',
            name='wake_at',
            field=models.DateTimeField(db_default=datetime.datetime(1970, 1, 1, 0, 0, tzinfo=datetime.timezone.utc), help_text="Claimable from (a parked run's wake-up time)."),
        ),
    ]
