"""Every write to tenant budgets empties the budget caches of every process (apps/core/invalidation.py):
an operator's new budget holds on the next request in each of them (apps/tenants/budgets.py)."""

from django.db import migrations

from apps.core.invalidation import TOPIC_BUDGET, invalidation_trigger


class Migration(migrations.Migration):
    dependencies = [("tenants", "0004_tenant_budget")]

    operations = [invalidation_trigger("tenants_tenantbudget", (TOPIC_BUDGET,))]
