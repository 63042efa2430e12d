"""Every write to agents or workflows empties the card caches of every process
(apps/core/invalidation.py): per-agent cards (name, roster, skills) follow on the next request."""

from django.db import migrations

from apps.core.invalidation import TOPIC_CARD, invalidation_trigger


class Migration(migrations.Migration):
    dependencies = [("agents", "0003_agentchange_append_only_trigger")]

    operations = [
        invalidation_trigger("agents_agent", (TOPIC_CARD,)),
        invalidation_trigger("agents_workflow", (TOPIC_CARD,)),
    ]
