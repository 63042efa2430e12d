"""Agent.a2a_tenant: the stored routing value (apps/agents/routing_values.py).

Nullable, no default: a catalog-only ALTER that rewrites nothing, safe while the previous release
serves (its processes never read the column). Existing rows stay NULL and keep the value they had,
derived on read as before; `manage.py reseal` stores it after the deploy, in batches.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0007_agent_pack"),
    ]

    operations = [
        migrations.AddField(
            model_name="agent",
            name="a2a_tenant",
            field=models.CharField(
                blank=True,
                editable=False,
                help_text="The stored a2aTenant routing value (routing_values.py); empty: not stored yet.",
                max_length=32,
                null=True,
            ),
        ),
    ]
