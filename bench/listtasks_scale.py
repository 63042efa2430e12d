"""A2A ListTasks as a tenant grows: p50/p99 of one page, and the plans PostgreSQL picks.

Fills the bench database (never the project's) with N runs in tenant `bench-list` and N in each of
`--other-tenants` tenants, by copying one real run row in SQL (`INSERT … SELECT generate_series`),
then times `apps.a2a.selectors.task_page` (the ListTasks selector: count + one keyset page of 50,
newest status first) and prints `EXPLAIN (ANALYZE, BUFFERS)` of its two queries. In-process, no
HTTP: the HTTP cost is the GetTask scenario's; this isolates the query's growth.

    .venv/bin/python bench/listtasks_scale.py --sizes 10000,100000 --other-tenants 10
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "openwop_host.settings")

import django  # noqa: E402

django.setup()

from django.db import connection  # noqa: E402

from apps.a2a.selectors import task_page  # noqa: E402
from apps.runs.models import Run  # noqa: E402
from apps.tenants.selectors import subject_from_authorization  # noqa: E402
from apps.tenants.services import api_key_create, tenant_get_or_create  # noqa: E402

TENANT = "bench-list"


def fill(slug: str, size: int) -> int:
    """Top the tenant up to `size` runs, copies of one existing run with fresh ids and times."""
    tenant, _ = tenant_get_or_create(slug=slug)
    have = Run.unscoped_all_tenants.filter(tenant=tenant).count()
    if have >= size:
        return have
    template = Run.unscoped_all_tenants.order_by("pk").first()
    if template is None:
        raise SystemExit("no run to copy: run a GetTask/SendMessage bench first (bench/run.py creates one)")
    columns = [f.column for f in Run._meta.concrete_fields if f.column != "id"]
    replaced = {
        "tenant_id": "%s",
        "run_id": "%s || '/ls' || md5(random()::text || g::text)",
        "created_at": "now() - (g || ' seconds')::interval",
        "updated_at": "now() - (g || ' seconds')::interval",
        "context_id": "''",
    }
    select = ", ".join(replaced.get(c, f'"{c}"') for c in columns)
    sql = (
        f"INSERT INTO runs_run ({', '.join(f'{chr(34)}{c}{chr(34)}' for c in columns)}) "
        f"SELECT {select} FROM runs_run, generate_series(%s, %s) AS g WHERE runs_run.id = %s"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [tenant.pk, slug, have + 1, size, template.pk])
        cursor.execute("ANALYZE runs_run")
    return size


def explain(sql: str, params: tuple) -> str:
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params)
        return "\n".join(row[0] for row in cursor.fetchall())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--other-tenants", type=int, default=10)
    parser.add_argument("--n", type=int, default=50, help="timed pages per size")
    args = parser.parse_args()
    tenant, _ = tenant_get_or_create(slug=TENANT)
    _, key = api_key_create(tenant=tenant, label="listtasks bench")
    subject = subject_from_authorization(f"Bearer {key}")
    results = []
    for size in (int(s) for s in args.sizes.split(",")):
        started = time.monotonic()
        fill(TENANT, size)
        for i in range(args.other_tenants):
            fill(f"bench-list-other-{i}", size)
        filled = time.monotonic() - started

        def page() -> object:
            return task_page(subject=subject, context_id=None, state=None, status_after=None, page_size=None,
                             page_token=None, include_artifacts=False)  # fmt: skip

        page()
        samples = []
        for _ in range(args.n):
            t = time.perf_counter()
            page()
            samples.append((time.perf_counter() - t) * 1000)
        samples.sort()
        p50, p99 = statistics.median(samples), samples[max(0, int(len(samples) * 0.99) - 1)]
        results.append((size, p50, p99))
        print(f"\n== {size} runs in the tenant, {args.other_tenants} other tenants of the same size "
              f"(filled in {filled:.0f} s): one page p50 {p50:.1f} ms, p99 {p99:.1f} ms (n={args.n})")  # fmt: skip
        runs = Run.objects.for_tenant(tenant.pk)
        count_sql, count_params = runs.order_by().values("pk").query.sql_with_params()  # as .count() does
        print("-- count (totalSize):")
        print(explain(f"SELECT COUNT(*) FROM ({count_sql}) AS sub", count_params))
        page_sql, page_params = (
            runs.select_related("workflow").order_by("-updated_at", "-pk")[:51].query.sql_with_params()
        )
        print("-- page (newest status first, 50 + 1):")
        print(explain(page_sql, page_params))
    base = results[0][2]
    print("\nsize      p50 ms   p99 ms   p99 / p99 at first size")
    for size, p50, p99 in results:
        print(f"{size:<9} {p50:7.1f}  {p99:7.1f}   {p99 / base:.2f}")


if __name__ == "__main__":
    main()
