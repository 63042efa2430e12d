"""Every write to the skill routes empties the card caches of every process
(apps/core/invalidation.py): the card's skills follow the routing table on the next request."""

from django.db import migrations

from apps.core.invalidation import TOPIC_CARD, invalidation_trigger


class Migration(migrations.Migration):
    dependencies = [("a2a", "0001_initial")]

    operations = [
        invalidation_trigger("a2a_skillroute", (TOPIC_CARD,)),
    ]
