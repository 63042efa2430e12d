"""What one A2A request's version negotiation and its audit record cost, measured in-process.

No HTTP and no load generator: each step of GetTask's path is timed on its own, sequentially, on
the bench database with production settings (bench/run.py passes the environment), with the
number of SQL statements it runs. There is no bypass to compare against, so the decision alone
(`decide` on the facet's values) is timed beside `negotiation_decide` (decision + the durable
`negotiation.decided` host event: a transaction with the Subject's sequence-row lock and a commit).

    .venv/bin/python bench/negotiation_cost.py --key <api key> --task <task id> [--n 300]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "openwop_host.settings")

import django  # noqa: E402

django.setup()

from django.db import connection  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402

from apps.a2a import operations  # noqa: E402
from apps.a2a.card import features_current  # noqa: E402
from apps.facets.negotiation import decide, inbound_peer_origin, negotiation_decide  # noqa: E402
from apps.facets.services import facet_ensure  # noqa: E402
from apps.tenants.selectors import subject_from_authorization  # noqa: E402


def timed(step: Callable[[], object], n: int) -> dict[str, float]:
    step()  # warm caches and the connection
    with CaptureQueriesContext(connection) as queries:
        step()
    samples = []
    for _ in range(n):
        started = time.perf_counter()
        step()
        samples.append((time.perf_counter() - started) * 1000)
    samples.sort()
    return {
        "sql": len(queries.captured_queries),
        "p50_ms": round(statistics.median(samples), 3),
        "p99_ms": round(samples[int(len(samples) * 0.99) - 1], 3),
        "mean_ms": round(statistics.fmean(samples), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--key", required=True)
    parser.add_argument("--task", required=True)
    parser.add_argument("--n", type=int, default=300)
    args = parser.parse_args()
    subject = subject_from_authorization(f"Bearer {args.key}")
    origin = inbound_peer_origin(origin_header=None, subject=subject)

    def decision_only() -> object:
        facet = facet_ensure(protocol="a2a")
        return decide(
            protocol="a2a", offered=list(facet.versions), preferred=facet.preferred_version,
            floor=facet.minimum_version, requested="1.0", peer_offers=None, authenticated=True,
        )  # fmt: skip

    steps: dict[str, Callable[[], object]] = {
        "authenticate (API key -> Subject)": lambda: subject_from_authorization(f"Bearer {args.key}"),
        "negotiation: decision only (facet + decide)": decision_only,
        "negotiation_decide (decision + durable record)": lambda: negotiation_decide(
            protocol="a2a", requested="1.0", peer_origin=origin, subject=subject, run=None
        ),
        "features_current (card features)": features_current,
        "GetTask snapshot (run, events, messages)": lambda: operations._snapshot(subject, args.task, None),
    }

    def record_async_commit() -> object:
        # Diagnosis only (not a proposal): the same call with the commit's WAL flush deferred, to
        # show how much of the record's cost is the fsync at commit.
        with connection.cursor() as cursor:
            cursor.execute("SET synchronous_commit TO off")
        try:
            return steps["negotiation_decide (decision + durable record)"]()
        finally:
            with connection.cursor() as cursor:
                cursor.execute("SET synchronous_commit TO on")

    steps["  same, synchronous_commit=off (diagnosis)"] = record_async_commit
    print(f"{'step':50} {'SQL':>4} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8}   (n={args.n}, sequential)")
    for name, step in steps.items():
        r = timed(step, args.n)
        print(f"{name:50} {r['sql']:>4} {r['p50_ms']:>8} {r['p99_ms']:>8} {r['mean_ms']:>8}")


if __name__ == "__main__":
    main()
