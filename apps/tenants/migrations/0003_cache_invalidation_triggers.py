"""Every write to API keys or tenants empties the API key -> Subject caches of every process
(apps/core/invalidation.py): a revocation holds on the next request in each of them. Tenants also
feed the per-agent cards (an agent is looked up in its tenant's inventory)."""

from django.db import migrations

from apps.core.invalidation import TOPIC_APIKEY, TOPIC_CARD, invalidation_trigger


class Migration(migrations.Migration):
    dependencies = [("tenants", "0002_operator_auditor_groups")]

    operations = [
        invalidation_trigger("tenants_apikey", (TOPIC_APIKEY,)),
        invalidation_trigger("tenants_tenant", (TOPIC_APIKEY, TOPIC_CARD)),
    ]
