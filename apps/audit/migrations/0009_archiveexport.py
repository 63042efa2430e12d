"""Exports of the records to the archive (issue 36 item 3, apps/audit/archive.py). Rows are the
evidence that records were archived before they expired: append-only like the records."""

import django.db.models.deletion
import django.db.models.manager
from django.db import migrations, models

from apps.core.append_only import append_only_trigger


class Migration(migrations.Migration):

    dependencies = [
        ('audit', '0008_hostevent_chain'),
        ('tenants', '0003_cache_invalidation_triggers'),
    ]

    operations = [
        migrations.CreateModel(
            name='ArchiveExport',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('since', models.DateTimeField(blank=True, help_text='Start (inclusive); empty: from the first record.', null=True)),
                ('until', models.DateTimeField(help_text='End of the range (exclusive).')),
                ('file_url', models.CharField(help_text="The gzip'd JSON Lines object.", max_length=1024)),
                ('manifest_url', models.CharField(max_length=1024)),
                ('count', models.PositiveBigIntegerField()),
                ('size', models.PositiveBigIntegerField(help_text='Bytes of the gzip file.')),
                ('sha256', models.CharField(help_text="Hex SHA-256 of the gzip file's bytes.", max_length=64)),
                ('streams', models.JSONField(default=list, help_text='Per stream: subjectId, count, first/last sequence, head.')),
                ('exported_at', models.DateTimeField()),
                ('tenant', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to='tenants.tenant')),
            ],
            options={
                'ordering': ['-exported_at', '-pk'],
                'abstract': False,
                'base_manager_name': 'unscoped_all_tenants',
                'default_manager_name': 'unscoped_all_tenants',
                'constraints': [models.CheckConstraint(condition=models.Q(('since__isnull', True), ('since__lt', models.F('until')), _connector='OR'), name='archiveexport_since_before_until'), models.CheckConstraint(condition=models.Q(('sha256__regex', '^[0-9a-f]{64}$')), name='archiveexport_sha256')],
            },
            managers=[
                ('unscoped_all_tenants', django.db.models.manager.Manager()),
            ],
        ),
        append_only_trigger("audit_archiveexport"),
    ]
