"""Runs carry their W3C trace context (interop.md §Trace context)."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('runs', '0003_run_agent_id'),
    ]

    operations = [
        migrations.AddField(
            model_name='run',
            name='traceparent',
            field=models.CharField(blank=True, default='', max_length=55),
        ),
        migrations.AddField(
            model_name='run',
            name='tracestate',
            field=models.CharField(blank=True, default='', max_length=512),
        ),
    ]
