"""Peer credentials say what a peer's agent card must prove: cardSignaturePolicy, a pinned public key."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('peers', '0001_initial'),
        ('tenants', '0003_cache_invalidation_triggers'),
    ]

    operations = [
        migrations.AddField(
            model_name='peercredential',
            name='card_signature_policy',
            field=models.CharField(choices=[('require', 'Require a valid signature'), ('verify-if-present', 'Verify a signature when the card carries one'), ('ignore', 'Do not check signatures')], default='verify-if-present', max_length=32),
        ),
        migrations.AddField(
            model_name='peercredential',
            name='pinned_card_key',
            field=models.JSONField(blank=True, default=None, help_text="A public JWK the peer's card must be signed with, instead of its jku (public material only).", null=True),
        ),
        migrations.AddConstraint(
            model_name='peercredential',
            constraint=models.CheckConstraint(condition=models.Q(('card_signature_policy__in', ['require', 'verify-if-present', 'ignore'])), name='peer_credential_card_signature_policy_valid'),
        ),
    ]
