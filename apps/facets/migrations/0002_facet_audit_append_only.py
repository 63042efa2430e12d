"""Facet changes and registry evaluations are audit trails: append-only on PostgreSQL too."""

from django.db import migrations

from apps.core.append_only import append_only_trigger


class Migration(migrations.Migration):
    dependencies = [("facets", "0001_initial")]

    operations = [append_only_trigger("facets_facetchange"), append_only_trigger("facets_facetrefresh")]
