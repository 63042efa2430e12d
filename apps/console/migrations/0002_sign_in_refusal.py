"""Sign-ins refused by the throttle are audited; the table is append-only (a trigger on PostgreSQL)."""

import django.utils.timezone
from django.db import migrations, models

from apps.core.append_only import append_only_trigger


class Migration(migrations.Migration):

    dependencies = [
        ('console', '0001_initial'),
    ]

    operations = [
        migrations.CreateModel(
            name='SignInRefusal',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('door', models.CharField(choices=[('admin', 'admin (staff)'), ('console', 'console')], max_length=16)),
                ('username', models.CharField(help_text='As entered, stripped and NFKC-normalized.', max_length=150)),
                ('address', models.CharField(help_text='The client address (IPv6: its /64).', max_length=64)),
                ('at', models.DateTimeField(db_index=True, default=django.utils.timezone.now)),
            ],
            options={
                'ordering': ['-at'],
            },
        ),
        append_only_trigger("console_signinrefusal"),
    ]
