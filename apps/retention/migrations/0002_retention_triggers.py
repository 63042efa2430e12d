"""Retention changes are an audit trail (append-only); a policy write empties every process's
policy caches (topic `facet`, apps/retention/services.py run_ttl_ms); and the run log's
append-only trigger lets exactly one path delete: the retention job's batch transactions, which set
`openwop.retention_expiry` locally (apps/core/append_only.py). Every other
UPDATE or DELETE of runs_runevent is refused as before."""

from django.db import migrations

from apps.core.append_only import append_only_trigger, on_postgresql, refuse_change_function
from apps.core.invalidation import TOPIC_FACET, invalidation_trigger


class Migration(migrations.Migration):
    dependencies = [
        ("retention", "0001_initial"),
        ("runs", "0002_run_event_append_only"),
    ]

    operations = [
        append_only_trigger("retention_retentionchange"),
        invalidation_trigger("retention_retentionpolicy", (TOPIC_FACET,)),
        migrations.RunPython(
            on_postgresql([refuse_change_function("runs_runevent", expirable=True)]),
            on_postgresql([refuse_change_function("runs_runevent")]),
            elidable=False,
        ),
    ]
