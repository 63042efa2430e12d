"""In-process cost of the chain's independence from the writer's version (apps/audit/chain.py,
migration 0013): the record append statement of this release, with the stream table's trigger
installed, against the previous release's statement (0.19.0, 556a03d) without the trigger.

    DATABASE_URL=postgres://.../<a scratch database> .venv/bin/python bench/chain_head_cost.py [--n 10000] [--repeats 5]

The database must be migrated and is written to (tenant `bench-chainhead`, fresh streams per run);
the trigger is dropped for the "no trigger" runs and created again before the script ends, so
never point it at a database that serves. With the trigger installed and without, for a batch of 1
record and of 16 records of one stream, the two statements run back to back `n` times, each on its
own stream (psycopg, autocommit: each is its own transaction, prepared after 5 executions, as the
group commit runs them), `repeats` times; it prints each statement's median and the median of the
paired differences (this - previous), in microseconds per statement. With the trigger installed,
the previous statement is what an old pod pays during the upgrade (the trigger's function runs
for it), this one what the new release pays (the trigger's WHEN is false for it). The Python content
hash is the same in every variant and is left out. On a loaded machine each commit's WAL flush
dominates and varies more than the statements differ: `--no-flush-wait` leaves it out.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

# The previous release's statement (git show 556a03d:apps/audit/chain.py APPEND_SQL), as in
# tests/audit/old_writers.py.
_LINK = "encode(sha256(convert_to({prev} || ':' || ({seq})::text || ':' || {content}, 'UTF8')), 'hex')"
PREVIOUS_SQL = f"""
WITH RECURSIVE r AS (
    SELECT * FROM unnest(
        %(tenant_id)b::bigint[], %(subject_id)b::text[], %(subject)b::text[], %(event_id)b::text[],
        %(type)b::text[], %(payload)b::text[], %(durable)b::boolean[], %(ordinal)b::bigint[],
        %(at)b::timestamptz[], %(content)b::text[]
    ) AS r(tenant_id, subject_id, subject, event_id, type, payload, durable, ordinal, at, content)
), wanted AS (
    SELECT tenant_id, subject_id, count(*) AS n FROM r GROUP BY tenant_id, subject_id
), locked AS MATERIALIZED (
    SELECT s.id, s.tenant_id, s.subject_id, s.last_sequence, s.last_digest, w.n FROM audit_hosteventstream AS s
    JOIN wanted AS w ON s.tenant_id = w.tenant_id AND s.subject_id = w.subject_id
    ORDER BY s.tenant_id, s.subject_id
    FOR UPDATE OF s
), chain AS (
    SELECT r.tenant_id, r.subject_id, r.ordinal, l.last_sequence + 1 AS sequence, l.last_digest::text AS prev,
           {_LINK.format(prev="l.last_digest", seq="l.last_sequence + 1", content="r.content")} AS digest
    FROM r JOIN locked AS l ON l.tenant_id = r.tenant_id AND l.subject_id = r.subject_id
    WHERE r.ordinal = 1
    UNION ALL
    SELECT r.tenant_id, r.subject_id, r.ordinal, c.sequence + 1, c.digest,
           {_LINK.format(prev="c.digest", seq="c.sequence + 1", content="r.content")}
    FROM chain AS c JOIN r ON r.tenant_id = c.tenant_id AND r.subject_id = c.subject_id AND r.ordinal = c.ordinal + 1
), bumped AS (
    UPDATE audit_hosteventstream AS s SET last_sequence = s.last_sequence + l.n, last_digest = c.digest
    FROM locked AS l JOIN chain AS c ON c.tenant_id = l.tenant_id AND c.subject_id = l.subject_id AND c.ordinal = l.n
    WHERE s.id = l.id
)
INSERT INTO audit_hostevent (
    tenant_id, subject_id, subject, event_id, type, payload, durable, sequence, at, prev_digest, digest
)
SELECT r.tenant_id, r.subject_id, r.subject::jsonb, r.event_id, r.type, r.payload::jsonb, r.durable,
       c.sequence, r.at, c.prev, c.digest
FROM r JOIN chain AS c ON c.tenant_id = r.tenant_id AND c.subject_id = r.subject_id AND c.ordinal = r.ordinal
RETURNING event_id, id, sequence, prev_digest, digest
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=10_000, help="statements per variant and run")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--no-flush-wait", action="store_true", help="synchronous_commit = off: the statement, not the WAL flush"
    )
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "openwop_host.settings")
    import django

    django.setup()
    import psycopg
    from django.utils import timezone

    from apps.audit.chain import APPEND_SQL
    from apps.core.ids import mint_opaque
    from apps.tenants.services import tenant_get_or_create

    migration = __import__("apps.audit.migrations.0013_chain_head", fromlist=["TRACK_HEAD"])
    tenant, _ = tenant_get_or_create(slug="bench-chainhead")
    subject = {"issuer": "bench", "subjectId": "bench", "tenant": tenant.slug, "lane": "api-key", "kind": "user"}
    payload = {"protocol": "a2a", "outcome": "accepted", "version": "1.0", "requested": "1.0", "peerDigest": "p" * 16}
    content = secrets.token_hex(32)  # any content hash: the Python half is the same in every variant

    def params(stream: str, size: int) -> dict[str, list[Any]]:
        now = timezone.now()
        return {"tenant_id": [tenant.pk] * size, "subject_id": [stream] * size,
                "subject": [json.dumps(subject)] * size, "event_id": [mint_opaque() for _ in range(size)],
                "type": ["negotiation.decided"] * size, "payload": [json.dumps(payload)] * size,
                "durable": [True] * size, "ordinal": list(range(1, size + 1)), "at": [now] * size,
                "content": [content] * size}  # fmt: skip

    variants = [("previous statement", PREVIOUS_SQL), ("this statement", APPEND_SQL)]
    # {(trigger installed?, batch size): {variant: [us per statement]}}, and the paired differences
    # (this - previous, the two statements run back to back: the machine's load drifts out).
    times: dict[tuple[bool, int], dict[str, list[float]]] = {}
    diffs: dict[tuple[bool, int], list[float]] = {}
    with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as conn:
        if args.no_flush_wait:
            conn.execute("SET synchronous_commit = off")
        try:
            for repeat in range(args.repeats):
                for trigger in (False, True) if repeat % 2 == 0 else (True, False):
                    conn.execute(migration.UNTRACK_HEAD[0])
                    if trigger:
                        conn.execute(migration.TRACK_HEAD[1])
                    for size in (1, 16):
                        salt = secrets.token_hex(4)
                        streams = {label: f"{label[:4]}-{repeat}-{size}-{salt}" for label, _ in variants}
                        for stream in streams.values():
                            conn.execute(
                                "INSERT INTO audit_hosteventstream (tenant_id, subject_id, last_sequence)"
                                " VALUES (%s, %s, 0)",
                                [tenant.pk, stream],
                            )
                        cell = times.setdefault((trigger, size), {label: [] for label, _ in variants})
                        with conn.cursor() as cursor:
                            for i in range(args.n // size + 20):
                                took = {}
                                for label, sql in variants if i % 2 else variants[::-1]:
                                    values = params(streams[label], size)
                                    started = time.perf_counter()
                                    cursor.execute(sql, values)
                                    cursor.fetchall()
                                    took[label] = (time.perf_counter() - started) * 1e6
                                if i >= 20:  # warm-up: prepared, caches warm
                                    for label, value in took.items():
                                        cell[label].append(value)
                                    diffs.setdefault((trigger, size), []).append(
                                        took["this statement"] - took["previous statement"]
                                    )
        finally:
            conn.execute(migration.UNTRACK_HEAD[0])
            conn.execute(migration.TRACK_HEAD[1])
    print(f"{args.n} records per cell and run, {args.repeats} runs, the two statements alternating; us per statement:")
    for (trigger, size), cell in sorted(times.items()):
        where = "trigger installed" if trigger else "no trigger"
        medians = ", ".join(f"{label} {statistics.median(values):.1f}" for label, values in cell.items())
        paired = statistics.median(diffs[(trigger, size)])
        print(f"  batch of {size:2d}, {where}: median {medians}; this - previous, paired median {paired:+.1f}")


if __name__ == "__main__":
    main()
