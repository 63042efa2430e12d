"""Every write to a facet empties the facet and card caches of every process
(apps/core/invalidation.py): an operator's edit holds on the next request in each of them."""

from django.db import migrations

from apps.core.invalidation import TOPIC_CARD, TOPIC_FACET, invalidation_trigger


class Migration(migrations.Migration):
    dependencies = [("facets", "0002_facet_audit_append_only")]

    operations = [
        invalidation_trigger("facets_facet", (TOPIC_FACET, TOPIC_CARD)),
    ]
