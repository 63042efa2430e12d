"""The executor's two partial indexes (engine.run_claim_next), built without locking writes.

`run_claim` holds only unleased runnable runs (a sliver of the table), `run_in_progress` only
leased ones (at most the workers' threads). CONCURRENTLY, outside a transaction: the previous
release keeps inserting and updating runs while they build. Reversible: dropped concurrently.
"""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):

    atomic = False

    dependencies = [
        ('runs', '0011_run_wake_at'),
        ('tenants', '0004_tenant_budget'),
    ]

    operations = [
        AddIndexConcurrently(
            model_name='run',
            index=models.Index(condition=models.Q(('lease_owner', ''), ('status__in', ['cancelling', 'pending', 'running'])), fields=['queue', 'tenant', 'wake_at'], name='run_claim'),
        ),
        AddIndexConcurrently(
            model_name='run',
            index=models.Index(condition=models.Q(('lease_owner', ''), _negated=True), fields=['tenant'], name='run_in_progress'),
        ),
    ]
