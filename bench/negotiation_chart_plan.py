"""The auditors' chart query at 10M negotiation records: its plan, which never reads the records.

Fills the database named by DATABASE_URL (a scratch one you created and migrated; never the
project's) with `--records` (default 10,000,000) `negotiation.decided` host events over `--days`
days and `--tenants` tenants, in `INSERT … SELECT generate_series` statements of `--batch` rows
(the statement trigger of audit migration 0005 folds each statement into the daily rollup, as it
does for the group-commit writer's multi-row INSERTs), then prints `EXPLAIN (ANALYZE, BUFFERS)` of
`apps.audit.negotiations.negotiation_daily_query` (the charts' one query: the rollup, a few rows
per day) unfiltered and filtered, and of the list's first page query (the partial index on
(at, id) WHERE type = 'negotiation.decided'). PostgreSQL only.

    createdb openwop_chartplan
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/openwop_chartplan DJANGO_DEBUG=1 \\
      .venv/bin/python manage.py migrate
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/openwop_chartplan DJANGO_DEBUG=1 \\
      .venv/bin/python bench/negotiation_chart_plan.py --records 10000000
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "openwop_host.settings")

import django  # noqa: E402

django.setup()

from django.db import connection  # noqa: E402

from apps.audit.models import HostEvent, NegotiationDailyCount  # noqa: E402
from apps.audit.negotiations import NegotiationFilters, negotiation_daily_query  # noqa: E402
from apps.facets.negotiation import NEGOTIATION_EVENT  # noqa: E402
from apps.tenants.services import tenant_get_or_create  # noqa: E402

FILL = """
INSERT INTO audit_hostevent (tenant_id, subject_id, subject, event_id, type, payload, durable, sequence, at)
SELECT %(tenant)s, 'bench-chart', '{}'::jsonb, 'evt-chart-' || %(tenant)s || '-' || lpad(n::text, 12, '0'),
       'negotiation.decided',
       jsonb_build_object('protocol', CASE WHEN n %% 2 = 0 THEN 'a2a' ELSE 'mcp' END,
                          'outcome', CASE WHEN n %% 7 = 0 THEN 'refused' ELSE 'accepted' END,
                          'version', '1.0', 'requested', CASE WHEN n %% 11 = 0 THEN '1.1' ELSE '1.0' END),
       true, n, now() - (n %% %(days)s) * interval '1 day' - (n %% 86400) * interval '1 second'
FROM generate_series(%(first)s, %(last)s) AS n
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=10_000_000)
    parser.add_argument("--days", type=int, default=365)
    parser.add_argument("--tenants", type=int, default=10)
    parser.add_argument("--batch", type=int, default=1_000_000)
    args = parser.parse_args()
    if connection.vendor != "postgresql":
        sys.exit("PostgreSQL only: point DATABASE_URL at a scratch database")

    tenants = [tenant_get_or_create(slug=f"bench-chart-{i}")[0] for i in range(args.tenants)]
    per_tenant = args.records // len(tenants)
    started = time.monotonic()
    with connection.cursor() as cursor:
        for tenant in tenants:
            have = HostEvent.unscoped_all_tenants.filter(tenant=tenant, subject_id="bench-chart").count()
            for first in range(have + 1, per_tenant + 1, args.batch):
                last = min(first + args.batch - 1, per_tenant)
                cursor.execute(FILL, {"tenant": tenant.pk, "days": args.days, "first": first, "last": last})
                print(f"  {tenant.slug}: records {first}..{last} ({time.monotonic() - started:.0f} s)", flush=True)
        cursor.execute("VACUUM ANALYZE audit_hostevent")
        cursor.execute("VACUUM ANALYZE audit_negotiationdailycount")
    records = HostEvent.unscoped_all_tenants.filter(type=NEGOTIATION_EVENT).count()
    print(f"{records} negotiation records; rollup rows: {NegotiationDailyCount.unscoped_all_tenants.count()}")

    for label, filters in (
        ("every record", NegotiationFilters()),
        ("one tenant, one protocol", NegotiationFilters(tenant="bench-chart-0", protocol="a2a")),
    ):
        query = negotiation_daily_query(filters=filters)
        print(f"\n## chart query: {label}\n{query.explain(analyze=True, buffers=True)}")
    first_page = HostEvent.unscoped_all_tenants.filter(type=NEGOTIATION_EVENT).order_by("-at", "-pk").values("pk")[:101]
    print(f"\n## list, first page\n{first_page.explain(analyze=True, buffers=True)}")


if __name__ == "__main__":
    main()
