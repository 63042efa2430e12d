from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("core", "0002_backfill_progress"),
    ]

    operations = [
        migrations.CreateModel(
            name='JobStatus',
            fields=[
                ('name', models.CharField(help_text='The job\'s task name, e.g. retention.apply.', max_length=100, primary_key=True, serialize=False)),
                ('succeeded_at', models.DateTimeField(blank=True, null=True)),
                ('failed_at', models.DateTimeField(blank=True, null=True)),
                ('detail', models.JSONField(blank=True, default=dict, help_text='What the last successful pass did (counts).')),
            ],
            options={
                'verbose_name_plural': 'job statuses',
            },
        ),
    ]
