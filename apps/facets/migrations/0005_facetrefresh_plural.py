# The admin's name of the refresh rows (issue 53): "facet refreshes", not "facet refreshs". State
# only: no SQL runs.

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('facets', '0004_version_policy'),
    ]

    operations = [
        migrations.AlterModelOptions(
            name='facetrefresh',
            options={'ordering': ['-at', '-id'], 'verbose_name_plural': 'facet refreshes'},
        ),
    ]
