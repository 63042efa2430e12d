"""The agents' audit trail is append-only: on PostgreSQL a trigger refuses UPDATE and DELETE."""

from django.db import migrations

from apps.core.append_only import append_only_trigger


class Migration(migrations.Migration):
    dependencies = [("agents", "0002_agent_inventory")]

    operations = [append_only_trigger("agents_agentchange")]
