"""Signing keys' audit trail is append-only, and every write to the key table empties the card
caches of every process (apps/core/invalidation.py): an activation or retirement re-signs the
cards and re-lists the JWKS on the next request."""

from django.db import migrations

from apps.core.append_only import append_only_trigger
from apps.core.invalidation import TOPIC_CARD, invalidation_trigger


class Migration(migrations.Migration):
    dependencies = [("a2a", "0003_card_signing_keys")]

    operations = [
        append_only_trigger("a2a_cardsigningkeychange"),
        invalidation_trigger("a2a_cardsigningkey", (TOPIC_CARD,)),
    ]
