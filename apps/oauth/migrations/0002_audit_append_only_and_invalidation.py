"""Issuer changes are an audit trail (append-only on PostgreSQL too), and every write to a trusted
issuer empties the Subject cache (verified tokens) and the card cache (its security schemes) of
every process (apps/core/invalidation.py)."""

from django.db import migrations

from apps.core.append_only import append_only_trigger
from apps.core.invalidation import TOPIC_APIKEY, TOPIC_CARD, invalidation_trigger


class Migration(migrations.Migration):
    dependencies = [("oauth", "0001_initial")]

    operations = [
        append_only_trigger("oauth_trustedissuerchange"),
        invalidation_trigger("oauth_trustedissuer", (TOPIC_APIKEY, TOPIC_CARD)),
        invalidation_trigger("oauth_trustedissuer_allowed_tenants", (TOPIC_APIKEY, TOPIC_CARD)),
    ]
