"""Peer credentials: what the host presents to the peers its workflows call."""

import django.db.models.deletion
import django.db.models.manager
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('tenants', '0002_operator_auditor_groups'),
    ]

    operations = [
        migrations.CreateModel(
            name='PeerCredential',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('credential_id', models.CharField(help_text='Opaque; names no tenant.', max_length=128, unique=True)),
                ('origin', models.CharField(help_text='The only origin it is sent to: https://host[:port].', max_length=300)),
                ('scheme', models.CharField(default='Bearer', max_length=32)),
                ('secret_sealed', models.BinaryField(help_text='Fernet token (apps.core.sealing, peer purpose).')),
                ('label', models.CharField(blank=True, default='', max_length=200)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('tenant', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='tenants.tenant')),
            ],
            options={
                'ordering': ['created_at', 'id'],
                'abstract': False,
                'base_manager_name': 'unscoped_all_tenants',
                'default_manager_name': 'unscoped_all_tenants',
                'constraints': [models.CheckConstraint(condition=models.Q(('origin__startswith', 'https://')), name='peer_credential_origin_https')],
            },
            managers=[
                ('unscoped_all_tenants', django.db.models.manager.Manager()),
            ],
        ),
    ]
