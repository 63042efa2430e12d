"""A2A ListTasks as a tenant grows: p50/p99 of one page, and the plans PostgreSQL picks.

Fills the bench database (never the project's) with, for each size N, N runs in tenant
`bench-list-<N>` and N in each of its `--other-tenants` tenants, by copying one real run row in SQL
(`INSERT … SELECT generate_series`, one statement per tenant: 1M rows in ~2 min on the shared
2-vCPU machine), vacuums, then times `apps.a2a.selectors.task_page` (the ListTasks selector:
totalSize + one keyset page of 50, newest status first, with each task's messages and open
interrupt) for every size in alternation, and a status-filtered page (whose totalSize is read from
the tenant's per-status tally too, here matching all of its runs). Prints each page's SQL
statement count and `EXPLAIN (ANALYZE, BUFFERS)` of the totalSizes (the tenant's tally, unfiltered
and by status), the page, the page's messages and the contextId filter's count (an exact COUNT:
the tally cannot answer it). In-process, no HTTP: the HTTP cost is the GetTask scenario's;
this isolates the query's growth.

    .venv/bin/python bench/listtasks_scale.py --sizes 10000,100000 --other-tenants 10
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "openwop_host.settings")

import django  # noqa: E402

django.setup()

from django.db import connection  # noqa: E402
from django.db.models import Q  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402

from apps.a2a.models import TaskMessage  # noqa: E402
from apps.a2a.selectors import task_page  # noqa: E402
from apps.runs.a2a_wire import STATE_BY_STATUS  # noqa: E402
from apps.runs.models import Run, run_tally_column  # noqa: E402
from apps.runs.services import run_create  # noqa: E402
from apps.tenants.selectors import subject_from_authorization  # noqa: E402
from apps.tenants.services import api_key_create, tenant_get_or_create  # noqa: E402

TENANT = "bench-list"


def _template() -> Run:
    """The run every copy is made of: the database's first (bench/run.py's task), or a fresh one."""
    template = Run.unscoped_all_tenants.order_by("pk").first()
    if template is None:
        tenant, _ = tenant_get_or_create(slug="bench")
        _, key = api_key_create(tenant=tenant, label="listtasks template")
        subject = subject_from_authorization(f"Bearer {key}")
        template = run_create(subject=subject, workflow_id="conformance-noop", inputs={}, transport="a2a")
    return template


def fill(slug: str, size: int) -> int:
    """Top the tenant up to `size` runs, copies of one existing run with fresh ids and times."""
    tenant, _ = tenant_get_or_create(slug=slug)
    have = Run.unscoped_all_tenants.filter(tenant=tenant).count()
    if have >= size:
        return have
    template = _template()
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
    return size


def settle() -> None:
    """What autovacuum does to a freshly loaded table, done before timing rather than during it:
    statistics, and the visibility map that lets index-only scans skip the heap."""
    with connection.cursor() as cursor:
        cursor.execute("VACUUM (ANALYZE) runs_run")


def explain(sql: str, params: tuple) -> str:
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params)
        return "\n".join(row[0] for row in cursor.fetchall())


def _percentiles(samples: list[float]) -> tuple[float, float]:
    samples = sorted(samples)
    return statistics.median(samples), samples[max(0, int(len(samples) * 0.99) - 1)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--other-tenants", type=int, default=10)
    parser.add_argument("--n", type=int, default=50, help="timed pages per size")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    # One tenant per size (each with its own other tenants of that size), all present at once: the
    # pages of every size are then timed in alternation, so a busy moment of a shared machine
    # lands on all sizes alike instead of on whichever size was being timed.
    subjects, filled = {}, {}
    for size in sizes:
        started = time.monotonic()
        tenant, _ = tenant_get_or_create(slug=f"{TENANT}-{size}")
        fill(tenant.slug, size)
        for i in range(args.other_tenants):
            fill(f"{TENANT}-{size}-other-{i}", size)
        _, key = api_key_create(tenant=tenant, label="listtasks bench")
        subjects[size] = (tenant, subject_from_authorization(f"Bearer {key}"))
        filled[size] = time.monotonic() - started
    settle()
    # Every copy has the template's status: filtering by it matches the whole tenant.
    status = _template().status

    def page(size: int, state: int | None = None) -> Any:
        return task_page(subject=subjects[size][1], context_id=None, state=state, status_after=None,
                         page_size=None, page_token=None, include_artifacts=False)  # fmt: skip

    def timed(state: int | None, n: int) -> dict[int, list[float]]:
        samples: dict[int, list[float]] = {size: [] for size in sizes}
        for size in sizes:
            page(size, state)  # warm-up
        for i in range(n):
            for size in sizes[i % len(sizes) :] + sizes[: i % len(sizes)]:
                t = time.perf_counter()
                page(size, state)
                samples[size].append((time.perf_counter() - t) * 1000)
        return samples

    plain = timed(None, args.n)
    filtered = timed(STATE_BY_STATUS[status], max(5, args.n // 5))
    results = []
    for size in sizes:
        tenant = subjects[size][0]
        p50, p99 = _percentiles(plain[size])
        filtered_p50, filtered_p99 = _percentiles(filtered[size])
        with CaptureQueriesContext(connection) as ctx:
            total = page(size).total_size
        exact = Run.unscoped_all_tenants.filter(tenant=tenant).count()
        assert total == exact == size, (total, exact, size)  # totalSize stays exact
        results.append((size, p50, p99, len(ctx.captured_queries), filtered_p50, filtered_p99))
        print(f"\n== {size} runs in the tenant, {args.other_tenants} other tenants of the same size "
              f"(filled in {filled[size]:.0f} s): one page p50 {p50:.1f} ms, p99 {p99:.1f} ms (n={args.n}), "
              f"{len(ctx.captured_queries)} SQL statements, totalSize {total} (= COUNT(*)); "
              f"status-filtered page (all {size} match) p50 {filtered_p50:.1f} ms, "
              f"p99 {filtered_p99:.1f} ms")  # fmt: skip
        runs = Run.objects.for_tenant(tenant.pk)
        print("-- count (totalSize, unfiltered: the tenant's tally):")
        print(explain("SELECT SUM(runs) FROM runs_runtally WHERE tenant_id = %s", (tenant.pk,)))
        column = run_tally_column(status)
        print(f"-- count (totalSize, status filter, every run matches: the tally's {column} column):")
        print(explain(f"SELECT SUM({column}) FROM runs_runtally WHERE tenant_id = %s", (tenant.pk,)))
        page_sql, page_params = (
            runs.select_related("workflow").order_by("-updated_at", "-pk")[:51].query.sql_with_params()
        )
        print("-- page (newest status first, 50 + 1):")
        print(explain(page_sql, page_params))
        page_pks = list(runs.order_by("-updated_at", "-pk").values_list("pk", flat=True)[:50])
        messages_sql, messages_params = (
            TaskMessage.objects.for_tenant(tenant.pk).filter(run__in=page_pks).order_by("created_at", "id")
            .values_list("run_id", "document").query.sql_with_params()
        )  # fmt: skip
        print("-- the page's messages (one read for all 50 tasks):")
        print(explain(messages_sql, messages_params))
        for label, query in (
            ("contextId filter", runs.filter(Q(context_id="ctx-bench") | Q(context_id="", run_id="ctx-bench"))),
        ):
            count_sql, count_params = query.order_by().values("pk").query.sql_with_params()  # as .count()
            print(f"-- count (totalSize, {label}: exact COUNT):")
            print(explain(f"SELECT COUNT(*) FROM ({count_sql}) AS sub", count_params))
    base = results[0][2]
    print("\nsize      p50 ms   p99 ms   p99 / p99 at first size   SQL per page   status-filtered p50 / p99 ms")
    for size, p50, p99, statements, filtered_p50, filtered_p99 in results:
        print(f"{size:<9} {p50:7.1f}  {p99:7.1f}   {p99 / base:.2f}"
              f"                      {statements:<14} {filtered_p50:.1f} / {filtered_p99:.1f}")  # fmt: skip


if __name__ == "__main__":
    main()
