"""The records' hash chain (apps/audit/chain.py): digest columns on the records, the head and the
expiry anchor on the streams.

The chain of the records written before it is not computed here any more. It was, in this
migration's one transaction, with the append-only trigger disabled: on a database of 300k records
that held ACCESS EXCLUSIVE on the record table for 87 s while the previous release served, and
every exchange writes a record. A database that has run this migration keeps what it computed
then; on one that has not, the columns are added (constant defaults: no rewrite) and the records
stay without digests, which the streams' counters say (`last_digest` still GENESIS: migration
0013), until the chainer links them after the deploy, in batches, while the doors serve
(`manage.py audit_chain`, and the beat job `audit-chain-pending`: apps/audit/chainer.py).
"""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('audit', '0007_negotiation_peer_daily_triggers'),
    ]

    operations = [
        migrations.AddField(
            model_name='hostevent',
            name='digest',
            field=models.CharField(db_default='', help_text='SHA-256 chaining this record.', max_length=64),
        ),
        migrations.AddField(
            model_name='hostevent',
            name='prev_digest',
            field=models.CharField(db_default='', help_text="The predecessor's digest.", max_length=64),
        ),
        migrations.AddField(
            model_name='hosteventstream',
            name='expired_digest',
            field=models.CharField(db_default='0000000000000000000000000000000000000000000000000000000000000000', max_length=64),
        ),
        migrations.AddField(
            model_name='hosteventstream',
            name='expired_through',
            field=models.PositiveBigIntegerField(db_default=0),
        ),
        migrations.AddField(
            model_name='hosteventstream',
            name='last_digest',
            field=models.CharField(db_default='0000000000000000000000000000000000000000000000000000000000000000', help_text="The chain's head: the last record's digest.", max_length=64),
        ),
        migrations.RunPython(migrations.RunPython.noop, migrations.RunPython.noop, elidable=False),
    ]
