"""The capacity model (README §Scaling out): what one exchange of each door costs the shared
back ends, and what N exchanges a second need.

Starts our host as bench/run.py does (production settings, PostgreSQL + Redis, one uvicorn
process, the Celery worker), then sends each exchange `--n` times, one after another, and reads
what the back ends counted meanwhile:

- PostgreSQL (`pg_stat_database` of the bench database alone): transactions committed (the
  doors' pool runs one statement per transaction; an ORM write groups its statements in one),
  rows inserted and updated, and the bytes the database grew by (`pg_database_size`).
- Redis (`MONITOR`, counting only the commands sent to the bench's database number): commands.

An idle window of the same length is measured first and subtracted (the worker polls its
queue), so the figures are the exchange's own. Per-core throughput comes from a bench results
file (`--results`, default the one bench/README.md's headline is made from): the median
req/s of one server process on one core at c=16. The table for 1k, 10k and 100k exchanges a
second follows from both, with its assumptions printed beside it.

    .venv/bin/python bench/capacity.py --n 300            # writes bench/results/capacity.json and .md
"""

from __future__ import annotations

import argparse
import json
import math
import re
import secrets
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import psycopg
import redis

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import run as bench_run  # noqa: E402
from harness.wrk import Load  # noqa: E402

RESULTS = BENCH / "results"
# Which bench rows give a door's per-core throughput: (scenario, target) at c=16.
PER_CORE_ROWS = {
    "A2A GetTask": "gettask",
    "A2A SendMessage (settled run)": "sendmessage",
    "MCP tools/call (settled run)": "mcp",
    "A2A ListTasks (page of 20)": "listpage",
    "public agent card": "card",
}
RATES = (1_000, 10_000, 100_000)
HEADROOM = 0.7  # a replica is planned at 70 % of the throughput one core measured
RECORDS_DAYS = 90  # OPENWOP_RETENTION_RECORDS_DAYS' default: how long a GetTask's record is kept


def _send(load: Load, n: int) -> None:
    """One request of `load`, its placeholders filled; fails loudly on an answer without its marker."""
    body = load.body.replace("{{N}}", f"{n}-{secrets.token_hex(4)}").encode() if load.method == "POST" else None
    req = urllib.request.Request(load.url, data=body, method=load.method,
                                 headers={"Content-Type": "application/json", **load.headers})  # fmt: skip
    with urllib.request.urlopen(req, timeout=60) as resp:
        text = resp.read().decode()
    if load.ok_marker and load.ok_marker not in text:
        raise RuntimeError(f"{load.url}: the answer lacks {load.ok_marker!r}: {text[:300]}")


class RedisCommands:
    """Counts the commands Redis receives for one database number (MONITOR), in a thread."""

    def __init__(self, url: str) -> None:
        parsed = urlparse(url)
        self.db = int((parsed.path or "/0").lstrip("/") or 0)
        self.client = redis.Redis(host=parsed.hostname or "127.0.0.1", port=parsed.port or 6379)
        self.count = 0
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        self._ready.wait(10)

    def _watch(self) -> None:
        with self.client.monitor() as monitor:
            self._ready.set()
            for command in monitor.listen():
                if self._stop.is_set():
                    return
                if int(command.get("db", -1)) == self.db:
                    self.count += 1

    def stop(self) -> None:
        self._stop.set()
        self.client.ping()  # wakes the monitor so it sees the stop


def _pg_counts(url: str) -> dict[str, int]:
    """The database's counters, and each table's rows written (`rows:<table>`)."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT xact_commit + xact_rollback, tup_inserted, tup_updated, pg_database_size(current_database())"
            " FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
        tables = conn.execute("SELECT relname, n_tup_ins + n_tup_upd FROM pg_stat_user_tables").fetchall()
    assert row is not None
    counts = dict(zip(("transactions", "rows_inserted", "rows_updated", "bytes"), map(int, row), strict=True))
    counts.update({f"rows:{name}": int(n) for name, n in tables})
    return counts


# A PostgreSQL backend flushes its statistics at most once a second while busy, and an idle one
# (a pooled connection between requests) within PGSTAT_IDLE_INTERVAL, 10 s: each window waits it out.
STATS_SETTLE_SECONDS = 11


def _measure(url: str, monitor: RedisCommands, step: Any, n: int) -> dict[str, float]:
    """The back ends' counts over `n` calls of `step`."""
    time.sleep(STATS_SETTLE_SECONDS)
    pg_before, redis_before, started = _pg_counts(url), monitor.count, time.monotonic()
    for i in range(n):
        step(i)
    seconds = time.monotonic() - started
    time.sleep(STATS_SETTLE_SECONDS)
    pg_after = _pg_counts(url)
    counts = {k: pg_after[k] - pg_before.get(k, 0) for k in pg_after}
    counts = {k: v for k, v in counts.items() if not k.startswith("rows:") or v}
    counts["redis_commands"] = monitor.count - redis_before
    counts["seconds"] = seconds
    return counts


def _per_core(results: Path) -> dict[str, float]:
    data = json.loads(results.read_text())
    ours = next((r["target"] for r in data["rows"] if r["target"].startswith("ours (uvicorn")), None)
    found: dict[str, float] = {}
    for door, scenario in PER_CORE_ROWS.items():
        for row in data["rows"]:
            if row["scenario"] == scenario and row["target"] == ours and row["connections"] == 16:
                found[door] = float(row["rps"])
    return found


def _latest_results() -> Path:
    """The results file bench/README.md's generated headline is made from."""
    match = re.search(r"Latest results: `results/([^`]+\.json)`", (BENCH / "README.md").read_text())
    if match is None:
        raise SystemExit("bench/README.md names no latest results: pass --results")
    return RESULTS / match.group(1)


def _table(per_exchange: dict[str, dict[str, float]], per_core: dict[str, float]) -> list[str]:
    lines = [
        "| exchange | req/s per core (c=16) | PG transactions | rows written | bytes stored | Redis commands |",
        "|---|---|---|---|---|---|",
    ]
    for door, cost in per_exchange.items():
        rps = per_core.get(door)
        cells = [
            door,
            f"{rps:,.0f}" if rps is not None else "(not in the results file)",
            f"{cost['transactions']:.2f}",
            f"{cost['rows_inserted'] + cost['rows_updated']:.2f}",
            f"{cost['bytes']:,.0f}",
            f"{cost['redis_commands']:.2f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    mix = "A2A GetTask"
    if mix in per_exchange and mix in per_core:
        cost, rps = per_exchange[mix], per_core[mix]
        lines += [
            "",
            f"Planned for GetTask-shaped traffic (the commonest exchange), {int(HEADROOM * 100)} % of a measured"
            " core per replica:",
            "",
            "| exchanges/s | web replicas (1 core each) | PostgreSQL transactions/s | Redis commands/s"
            f" | database growth/day | database at {RECORDS_DAYS} days' records |",
            "|---|---|---|---|---|---|",
        ]
        for rate in RATES:
            replicas = math.ceil(rate / (rps * HEADROOM))
            grow = cost["bytes"] * rate * 86_400 / 1e9
            lines.append(
                f"| {rate:,} | {replicas:,} | {cost['transactions'] * rate:,.0f} | {cost['redis_commands'] * rate:,.0f}"
                f" | {grow:,.1f} GB | {grow * RECORDS_DAYS / 1000:,.1f} TB |"
            )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=300, help="exchanges of each kind")
    parser.add_argument("--results", type=Path, help="bench results JSON for per-core req/s (default: the README's)")
    parser.add_argument("--name", default="capacity", help="results file stem")
    args = parser.parse_args()
    results = args.results or _latest_results()
    bench_run.VAR.mkdir(parents=True, exist_ok=True)
    bench_run._reset_database(bench_run.DATABASE_URL)
    bench_run.manage("migrate", "--noinput", "-v", "0")
    key = bench_run.manage("create_api_key", "--tenant", "bench", "--label", "bench capacity")
    worker = bench_run.start_worker()
    host = bench_run.start_host(bench_run.RECOMMENDED, 1)
    monitor = RedisCommands(bench_run.REDIS_URL)
    try:
        base = f"http://127.0.0.1:{host.port}"
        task_id = bench_run.create_task(base, key)
        loads = {
            "A2A GetTask": bench_run.gettask_load(base, task_id, key),
            "A2A SendMessage (settled run)": bench_run.sendmessage_load(base, key),
            "MCP tools/call (settled run)": bench_run.mcp_load(base, "conformance-noop", key),
            "A2A ListTasks (page of 20)": bench_run.listpage_load(base, key),
            "public agent card": bench_run.card_load(base),
        }
        loads["A2A ListTasks (page of 20)"] = Load(  # a page of whatever the bench tenant has: no "next" marker
            url=loads["A2A ListTasks (page of 20)"].url, body=loads["A2A ListTasks (page of 20)"].body,
            headers=loads["A2A ListTasks (page of 20)"].headers, ok_marker='"tasks"',
        )  # fmt: skip
        for load in loads.values():  # warm: caches filled, first-request costs paid
            for i in range(20):
                _send(load, i)
        idle = _measure(bench_run.DATABASE_URL, monitor, lambda _i: time.sleep(0.01), args.n)
        per_exchange: dict[str, dict[str, float]] = {}
        for door, load in loads.items():
            counts = _measure(bench_run.DATABASE_URL, monitor, lambda i, load=load: _send(load, i), args.n)
            background = {k: idle[k] * counts["seconds"] / idle["seconds"] for k in ("transactions", "redis_commands")}
            per_exchange[door] = {
                k: max(0.0, (v - background.get(k, 0.0)) / args.n) for k, v in counts.items() if k != "seconds"
            }
            print(f"  {door:32} " + "  ".join(f"{k} {v:.2f}" for k, v in per_exchange[door].items()), flush=True)
    finally:
        monitor.stop()
        host.stop()
        worker.stop()
    per_core = _per_core(results)
    out = {
        "n": args.n, "per_exchange": per_exchange, "per_core_rps": per_core, "per_core_from": results.name,
        "headroom": HEADROOM, "idle": idle,
    }  # fmt: skip
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{args.name}.json").write_text(json.dumps(out, indent=2) + "\n")
    lines = [
        f"Capacity model: {args.n} of each exchange, one after another, on one host process"
        f" (bench/capacity.py); per-core req/s from results/{results.name}.",
        "",
        *_table(per_exchange, per_core),
    ]
    (RESULTS / f"{args.name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
