"""Issue 49's bench (scenario `fairness`): one tenant's load must not become another's.
bench/README.md "Fairness" says how to read it.

Tenant B works normally: GetTask on its own task at c = B_CONNECTIONS (wrk), and short runs a
worker must advance (`conformance-delay`, 50 ms, A2A SendMessage with returnImmediately). Each
measure of B is taken alone and while a tenant A bursts, alternating by repeat (alone, loaded,
alone, loaded, ...) on one host: the production-like target bench/run.py starts (uvicorn,
PostgreSQL, Redis, the Celery worker of 16 threads) plus a beat (as `make run`, compose and the
chart run one: the stuck-run sweeper is part of what a backlog does). A is one tenant per burst:

(a) `bench-fair-queue` queues BACKLOG runs of `conformance-delay` 2 s (SendMessage, returnImmediately,
    as fast as the host accepts them: SUBMIT_CONCURRENCY clients over its 16 keys), then B sends its
    runs. Accepted and refused runs are counted by reason (a runs budget refusing some is the design
    working, as long as B's runs are accepted). B's end-to-end time is measured from the client's
    clock just before its POST to the run's `completed_at` (written by the worker, same machine and
    clock): the accept path is included, there is no polling resolution, and no polling request is
    added to the host under test (the bench waits by reading the run rows from PostgreSQL). A run
    not finished WAIT_S after its POST counts as "at least" that long. After each loaded repeat
    every unfinished run of A (and of B) is cancelled through A2A CancelTask, and the bench waits
    until none is left unfinished and the broker's queue and its unacknowledged messages are empty,
    so every repeat starts from an idle host.
(b) `bench-fair-flood` floods GetTask at c = 64 over its 16 keys (a console user mints keys freely;
    the per-key limit is out of reach in every bench scenario, so only a tenant budget can refuse
    it). Where the host has tenant budgets (`manage.py tenant_budget`), A's is set to
    FLOOD_REQUESTS_PER_MINUTE: its flood is then refused for most of every window, and B's
    throughput says what those refusals cost. A's served and refused answers are counted.
(c) `bench-fair-streams` holds its stream budget: STREAMS_PER_KEY + 1 SSE streams per key over its
    16 keys on `/runs/{id}/events` of a run waiting at an approval gate (bench/sse_fanout.py's
    subscriber), held open through B's sample and ended by cancelling the run. The host runs with
    the default per-key stream limit (STREAMS_PER_KEY: the other scenarios' host allows 128), so A
    holds 16 x 32 streams and one more per key is refused; a tenant stream budget below that
    refuses more. Held and refused streams are counted.
(d) `bench-fair-list` lists its LIST_RUNS-run history (seeded in SQL by listtasks_scale.fill) with
    A2A ListTasks filtered by status and statusTimestampAfter (every run matches) at c = 8.

Targets (harness/report.py, each named "fairness: ..."): B's end-to-end time under (a) at most 3x
alone; B's GetTask throughput under (b) at least 0.67x alone; B's GetTask p99 under (b), (c), (d)
at most 2x alone. Ratios are ratios of medians with the min-max of the per-repeat ratios.

The clients of (a) run as `python bench/fairness.py send ...` on the generator's cores.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

from harness.procs import Server  # noqa: E402
from harness.wrk import BackgroundWrk, Load  # noqa: E402

TENANT_B = "bench-fair-b"
TENANT_QUEUE = "bench-fair-queue"
TENANT_FLOOD = "bench-fair-flood"
TENANT_STREAMS = "bench-fair-streams"
TENANT_LIST = "bench-fair-list"
A_KEYS = 16  # every A tenant's keys
B_CONNECTIONS = 4  # B's GetTask clients; every fairness row's `connections`
B_RUNS = 4  # B's runs per repeat, one after another
B_DELAY_MS = 50
BACKLOG = 2000
BACKLOG_DELAY_MS = 2000
SUBMIT_CONCURRENCY = 16
FLOOD_CONNECTIONS = 64
LIST_CONNECTIONS = 8
LIST_RUNS = 100_000
LIST_PAGE_MARKER = '"nextPageToken"'  # a full page with more to follow (bench/run.py's listpage)
STREAMS_PER_KEY = 32  # OPENWOP_MAX_STREAMS_PER_KEY's default
FLOOD_REQUESTS_PER_MINUTE = 600  # A's tenant request budget under (b), where the host has one
WAIT_QUICK_S = 30.0  # how long B's runs are waited for under --quick
WAIT_FULL_S = 300.0  # ... in the full run (the issue saw 49-233 s)
DRAIN_LIMIT_S = 300.0
LEAD_S = 1.0  # A's burst runs this long before B's sample starts
TERMINAL = ("completed", "failed", "cancelled")

# The fairness host: the bench's production target with the host's default per-key stream limit
# and tenant budgets (the other scenarios' host puts them out of reach: bench/run.py host_env).
# Every value is harmless on a host without tenant budgets.
HOST_ENV = {
    "OPENWOP_MAX_STREAMS_PER_KEY": str(STREAMS_PER_KEY),
    "OPENWOP_TENANT_REQUESTS_PER_MINUTE": "6000", "OPENWOP_TENANT_STREAMS": "128", "OPENWOP_MAX_STREAMS": "1000",
}  # fmt: skip
# Per-tenant overrides (manage.py tenant_budget set), where the host has tenant budgets: B's wrk at
# c = 4 sends far more than the 6,000 requests a minute a tenant may by default, so B's request
# budget is lifted (what is measured is what A does to B, not B's own budget); A's backlog tenant
# may queue all of its 2,000 runs (the scenario: every one accepted; by default it would be
# refused past 600 a minute and 1,000 queued), so (a) measures the fair claims, not the budget;
# A's flood tenant gets FLOOD_REQUESTS_PER_MINUTE. Every other budget is the host's default.
BUDGETS = {
    TENANT_B: {"requests-per-minute": "0"},
    TENANT_QUEUE: {"runs-per-minute": "0", "runs-queued": "0"},
    TENANT_FLOOD: {"requests-per-minute": str(FLOOD_REQUESTS_PER_MINUTE)},
}

# The rows' targets (harness/report.py judges them by these names, each against its scenario's first line).
ALONE = "B alone"
QUEUED = "B while A queues 2,000 runs of 2 s"
FLOODED = "B while A floods GetTask (c=64, 16 keys)"
STREAMING = "B while A holds its stream budget"
LISTING = "B while A lists 100k runs (filtered, c=8)"


# ---------------------------------------------------------------------------------------------
# Pure pieces (tests/bench/test_fairness.py)


def send_body(*, message_id: str, skill: str, data: dict[str, Any] | None, immediately: bool) -> str:
    """An A2A SendMessage routed to `skill`, its inputs as a data part."""
    message: dict[str, Any] = {"role": "ROLE_USER", "messageId": message_id, "parts": [{"text": "fairness"}],
                               "metadata": {"openwop": {"skillId": skill}}}  # fmt: skip
    if data is not None:
        message["parts"].append({"data": data})
    params: dict[str, Any] = {"message": message}
    if immediately:
        params["configuration"] = {"returnImmediately": True}
    return json.dumps({"jsonrpc": "2.0", "id": message_id, "method": "SendMessage", "params": params})


def cancel_body(task_id: str) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": f"cancel-{uuid.uuid4()}", "method": "CancelTask",
                       "params": {"id": task_id}})  # fmt: skip


def outcome(status: int, text: str) -> tuple[str, str]:
    """(task id, "") for an answered A2A call, ("", reason) for a refusal: the HTTP status, the
    JSON-RPC error code and, where the host names it, the budget (`429 -32000 tenant.runs_queued`)."""
    try:
        doc = json.loads(text)
    except ValueError:
        return "", f"HTTP {status}"
    result = doc.get("result") if isinstance(doc, dict) else None
    if isinstance(result, dict):
        task = result.get("task", result)
        if isinstance(task, dict) and task.get("id"):
            return str(task["id"]), ""
    error = doc.get("error") if isinstance(doc, dict) else None
    if not isinstance(error, dict):
        return "", f"HTTP {status}"
    reason = f"{status} {error.get('code')}"
    data = error.get("data")
    for info in data if isinstance(data, list) else [data]:
        budget = (info.get("metadata") or info).get("budget") if isinstance(info, dict) else None
        if budget:
            return "", f"{reason} {budget}"
    return "", reason


def tally(answers: list[list[Any]]) -> dict[str, Any]:
    """What a `send` answered: [t0, status, task id, reason] each -> sent, accepted, refused by reason."""
    refused: dict[str, int] = {}
    for _, _, task_id, reason in answers:
        if not task_id:
            refused[reason] = refused.get(reason, 0) + 1
    return {"sent": len(answers), "accepted": sum(1 for a in answers if a[2]), "refused": dict(sorted(refused.items()))}


def median_bound(values: list[tuple[float, bool]]) -> tuple[float | None, bool]:
    """The median of (value, is only a lower bound) pairs, and whether the median is itself only a
    lower bound. Lower bounds are values still growing when the bench stopped waiting: each is at
    least the wait, so none sorts below a measured value, and the median is a bound exactly when a
    middle element is one."""
    if not values:
        return None, False
    ordered = sorted(values, key=lambda v: (v[1], v[0]))
    n = len(ordered)
    middle = ordered[(n - 1) // 2 : n // 2 + 1]
    return round(statistics.median(v for v, _ in middle), 1), any(bound for _, bound in middle)


def end_to_end(answers: list[list[Any]], finished: dict[str, tuple[str, float | None]],
               *, gave_up_at: float) -> list[tuple[float, bool]]:  # fmt: skip
    """Each of B's runs in ms, from its POST (client clock) to its completed_at: a run refused,
    failed or unfinished is a lower bound (the time until the bench stopped waiting)."""
    out = []
    for t0, _, task_id, _ in answers:
        status, completed = finished.get(task_id, ("", None)) if task_id else ("", None)
        if status == "completed" and completed is not None:
            out.append((round(1000 * (completed - t0), 1), False))
        else:
            out.append((round(1000 * (gave_up_at - t0), 1), True))
    return out


def runs_rows(alone: list[dict[str, Any]], loaded: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of (a): B alone and B while A queues, each the median of its repeats' medians
    (`e2e_ms`, `e2e_ms_runs`; `e2e_ms_at_least` when the median is only a lower bound), with every
    run's time and A's accounting per repeat in the text."""
    rows = []
    for target, samples in ((ALONE, alone), (QUEUED, loaded)):
        medians = [median_bound(s["e2e"]) for s in samples]
        value, at_least = median_bound([(m, bound) for m, bound in medians if m is not None])
        lines = []
        for i, s in enumerate(samples):
            each = ", ".join(f"{'>=' if bound else ''}{ms / 1000:.2f}" for ms, bound in s["e2e"])
            lines.append(f"repeat {i + 1}: B's runs end to end (s): {each}; B sent {s['b']['sent']}, accepted "
                         f"{s['b']['accepted']}, refused {s['b']['refused'] or 'none'}")  # fmt: skip
            if "backlog" in s:
                a = s["backlog"]
                lines.append(f"  A sent {a['sent']} in {s['submit_s']} s: accepted {a['accepted']}, refused "
                             f"{a['refused'] or 'none'}; A's runs by status when B's were done: "
                             f"{s['a_status']}")  # fmt: skip
            if "backlog" in s or s["cancel"]["sent"]:
                busy = "" if s["drained"] else " (NOT drained: the next repeat starts on a busy host)"
                lines.append(
                    f"  then cancelled {s['cancel']['accepted']} unfinished runs in {s['cancel_s']} s "
                    f"(refused {s['cancel']['refused'] or 'none'}); idle after {s['drain_s']} s{busy}"
                )
        rows.append({
            "scenario": "fairness-runs", "target": target, "connections": B_CONNECTIONS, "e2e_ms": value,
            "e2e_ms_runs": [m for m, _ in medians], "e2e_ms_at_least": at_least, "repeats": len(samples),
            "stdout": "\n".join(lines), "returncode": 0,
        })  # fmt: skip
    return rows


# ---------------------------------------------------------------------------------------------
# The clients (a subprocess on the generator's cores: `python bench/fairness.py send ...`)


async def _send_all(url: str, headers: dict[str, str], keys: list[str], bodies: list[str],
                    concurrency: int) -> list[list[Any]]:  # fmt: skip
    import httpx

    gate = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:

        async def one(i: int, body: str) -> list[Any]:
            async with gate:
                sent = {k: v.replace("{{KEY}}", keys[i % len(keys)]) for k, v in headers.items()}
                sent["Content-Type"] = "application/json"
                t0 = time.time()
                try:
                    answer = await client.post(url, content=body, headers=sent)
                except httpx.HTTPError as exc:
                    return [t0, 0, "", type(exc).__name__]
                return [t0, answer.status_code, *outcome(answer.status_code, answer.text)]

        return list(await asyncio.gather(*(one(i, body) for i, body in enumerate(bodies))))


def send_main(args: argparse.Namespace) -> None:
    bodies = json.loads(Path(args.bodies).read_text())
    import uvloop

    answers = uvloop.run(_send_all(args.url, json.loads(args.headers), args.keys.split(","), bodies, args.concurrency))
    Path(args.report).write_text(json.dumps(answers))


# ---------------------------------------------------------------------------------------------
# Measuring (called by bench/run.py)


@dataclass
class Host:
    """What bench/run.py hands over: the running fairness host and how to reach it."""

    base: str
    servers: list[Server]
    env: dict[str, str]  # the host's environment, for manage.py and the clients
    database_url: str
    redis_url: str
    queue: str  # the Celery queue of the runs (its depth: drained or not)
    gen_cpus: str
    gettask: Callable[[str, str, str], Load]  # (base, task id, key) -> the GetTask load
    headers: Callable[[str], dict[str, str]]  # key -> the A2A request headers
    create_task: Callable[[str, str], str]  # (base, key) -> a completed task's id
    manage: Callable[..., str]  # manage.py with the host's environment -> its stdout


@dataclass
class Tenants:
    keys: dict[str, list[str]]
    tasks: dict[str, str] = field(default_factory=dict)
    budgets: str = ""


_SETUP = """
import json, sys
sys.path.insert(0, "bench")
from listtasks_scale import fill, settle
from apps.tenants.services import api_key_create, tenant_get_or_create
keys = {{}}
for slug, n in {counts!r}.items():
    tenant, _ = tenant_get_or_create(slug=slug)
    keys[slug] = [api_key_create(tenant=tenant, kind="user", label="bench fairness")[1] for _ in range(n)]
fill({list_tenant!r}, {list_runs})
settle()
print(json.dumps(keys))
"""


def setup(host: Host) -> Tenants:
    """The tenants, their keys, A's 100k-run history, A's flood budget where the host has tenant
    budgets, and the tasks the GetTask loads read."""
    started = time.monotonic()
    counts = {TENANT_B: 1, TENANT_QUEUE: A_KEYS, TENANT_FLOOD: A_KEYS, TENANT_STREAMS: A_KEYS, TENANT_LIST: 1}
    out = host.manage("shell", "-v", "0", "-c", _SETUP.format(counts=counts, list_tenant=TENANT_LIST,
                                                              list_runs=LIST_RUNS))  # fmt: skip
    tenants = Tenants(keys=json.loads(out.splitlines()[-1]))
    if "tenant_budget" in host.manage("help", "--commands").split():
        said = []
        for slug, budgets in BUDGETS.items():
            options = [part for name, value in budgets.items() for part in (f"--{name}", value)]
            host.manage("tenant_budget", "set", "--tenant", slug, *options, "--actor", "bench/fairness.py")
            said.append(f"{slug} " + ", ".join(f"{name} {value}" for name, value in budgets.items()))
        tenants.budgets = (f"tenant budgets (manage.py tenant_budget; 0 = unlimited): {'; '.join(said)}; "
                           "every other budget the host's default")  # fmt: skip
    else:
        tenants.budgets = "this host has no tenant budgets (no manage.py tenant_budget): nothing refuses A's flood"
    for slug in (TENANT_B, TENANT_FLOOD):
        tenants.tasks[slug] = host.create_task(host.base, tenants.keys[slug][0])
    print(f"  fairness: tenants ready in {time.monotonic() - started:.0f} s; {tenants.budgets}", flush=True)
    return tenants


def _sql(url: str, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(sql, params).fetchall()


_RUNS_SQL = "SELECT run_id, status, extract(epoch FROM completed_at)::float8 FROM runs_run WHERE run_id = ANY(%s)"
_UNFINISHED_SQL = """
SELECT r.run_id FROM runs_run AS r JOIN tenants_tenant AS t ON t.id = r.tenant_id
WHERE t.slug = ANY(%s) AND r.status NOT IN ('completed', 'failed', 'cancelled')
"""
_BY_STATUS_SQL = "SELECT status, count(*) FROM runs_run WHERE run_id = ANY(%s) GROUP BY status ORDER BY status"


def send(host: Host, *, keys: list[str], bodies: list[str], concurrency: int) -> list[list[Any]]:
    """`bodies` POSTed to the A2A JSON-RPC door by the client subprocess, `concurrency` at a time over
    `keys`: [t0 (time.time() just before the POST), status, task id, refusal reason] each."""
    with tempfile.TemporaryDirectory(prefix="bench-fairness-") as tmp:
        (Path(tmp) / "bodies.json").write_text(json.dumps(bodies))
        cmd = ["taskset", "-c", host.gen_cpus, sys.executable, str(Path(__file__).resolve()), "send",
               "--url", f"{host.base}/a2a/jsonrpc", "--headers", json.dumps(host.headers("{{KEY}}")),
               "--keys", ",".join(keys), "--concurrency", str(concurrency), "--bodies", f"{tmp}/bodies.json",
               "--report", f"{tmp}/answers.json"]  # fmt: skip
        done = subprocess.run(cmd, cwd=ROOT, env=host.env, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"the fairness client failed:\n{done.stderr[-2000:]}")
        return list(json.loads((Path(tmp) / "answers.json").read_text()))


def _delay_bodies(n: int, delay_ms: int, prefix: str) -> list[str]:
    return [send_body(message_id=f"{prefix}-{uuid.uuid4()}", skill="conformance-delay", data={"delayMs": delay_ms},
                      immediately=True) for _ in range(n)]  # fmt: skip


def wait_finished(url: str, ids: list[str], *, until: float) -> dict[str, tuple[str, float | None]]:
    """Reads the runs' rows (not the host) every 50 ms until every one is finished or time.time()
    reaches `until`: {run id: (status, completed_at as epoch seconds)}."""
    while True:
        rows = {run_id: (status, completed) for run_id, status, completed in _sql(url, _RUNS_SQL, (ids,))}
        if all(rows.get(i, ("",))[0] in TERMINAL for i in ids) or time.time() >= until:
            return rows
        time.sleep(0.05)


def broker_depth(redis_url: str, queue: str) -> int:
    """Messages waiting in the runs' queue (kombu keeps a queue's priority levels in lists named
    `<queue>\\x06\\x16<level>`) plus those a worker holds unacknowledged (acks late). Not the push
    queue beside it (`<queue>-push`), which the bench's worker does not consume."""
    import redis

    client = redis.Redis.from_url(redis_url)
    lists = queue_lists(queue, [k.decode() for k in client.scan_iter(match=f"{queue}*")])
    return sum(int(client.llen(k)) for k in lists) + int(client.hlen("unacked"))


def queue_lists(queue: str, names: list[str]) -> list[str]:
    """Of a Redis database's key names, the lists kombu keeps `queue`'s messages in."""
    return [n for n in names if n == queue or n.startswith(f"{queue}\x06\x16")]


def cancel_unfinished(host: Host, tenants: Tenants) -> tuple[dict[str, Any], float, bool, float]:
    """Cancels every unfinished run of A's backlog tenant and of B (A2A CancelTask, each with its
    tenant's key), then waits until none is unfinished and the broker holds nothing for the
    workers: (the cancels' tally, their seconds, drained, seconds until idle)."""
    started = time.monotonic()
    answers: list[list[Any]] = []
    for slug in (TENANT_QUEUE, TENANT_B):
        ids = [row[0] for row in _sql(host.database_url, _UNFINISHED_SQL, ([slug],))]
        if ids:
            answers += send(host, keys=tenants.keys[slug], bodies=[cancel_body(i) for i in ids], concurrency=8)
    cancelled = time.monotonic()
    drained = False
    while time.monotonic() - cancelled < DRAIN_LIMIT_S:
        left = _sql(host.database_url, _UNFINISHED_SQL, ([TENANT_QUEUE, TENANT_B],))
        if not left and broker_depth(host.redis_url, host.queue) == 0:
            drained = True
            break
        time.sleep(0.5)
    return tally(answers), round(cancelled - started, 1), drained, round(time.monotonic() - cancelled, 1)


def runs_sample(host: Host, tenants: Tenants, *, loaded: bool, wait_s: float) -> dict[str, Any]:
    """One repeat of (a), alone or with A's backlog queued first."""
    sample: dict[str, Any] = {}
    backlog_ids: list[str] = []
    if loaded:
        started = time.monotonic()
        answers = send(host, keys=tenants.keys[TENANT_QUEUE], concurrency=SUBMIT_CONCURRENCY,
                       bodies=_delay_bodies(BACKLOG, BACKLOG_DELAY_MS, "fair-a"))  # fmt: skip
        sample["submit_s"] = round(time.monotonic() - started, 1)
        sample["backlog"] = tally(answers)
        backlog_ids = [a[2] for a in answers if a[2]]
    b_bodies = _delay_bodies(B_RUNS, B_DELAY_MS, "fair-b")
    b_answers = send(host, keys=tenants.keys[TENANT_B], concurrency=1, bodies=b_bodies)
    ids = [a[2] for a in b_answers if a[2]]
    until = b_answers[0][0] + wait_s
    finished = wait_finished(host.database_url, ids, until=until)
    gave_up_at = min(time.time(), until)
    sample["e2e"] = end_to_end(b_answers, finished, gave_up_at=gave_up_at)
    sample["b"] = tally(b_answers)
    if loaded:
        by_status = _sql(host.database_url, _BY_STATUS_SQL, (backlog_ids,))
        sample["a_status"] = ", ".join(f"{status} {n}" for status, n in by_status) or "none"
    # Alone too: a run of B still unfinished would be ahead of the next repeat's.
    sample["cancel"], sample["cancel_s"], sample["drained"], sample["drain_s"] = cancel_unfinished(host, tenants)
    each = ", ".join(f"{'>=' if bound else ''}{ms / 1000:.2f}" for ms, bound in sample["e2e"])
    print(f"  fairness-runs {'loaded' if loaded else 'alone '}: B's runs end to end (s) {each}"
          + (f"; A accepted {sample['backlog']['accepted']}/{BACKLOG} in {sample['submit_s']} s, idle again after "
             f"{sample['cancel_s'] + sample['drain_s']:.0f} s" if loaded else ""), flush=True)  # fmt: skip
    return sample


def runs_point(host: Host, tenants: Tenants, *, repeats: int, wait_s: float) -> list[dict[str, Any]]:
    """(a): alone, loaded, alone, loaded, ... from an idle host (leftovers of an earlier run cancelled)."""
    cancel_unfinished(host, tenants)
    alone, loaded = [], []
    for _ in range(repeats):
        alone.append(runs_sample(host, tenants, loaded=False, wait_s=wait_s))
        loaded.append(runs_sample(host, tenants, loaded=True, wait_s=wait_s))
    return runs_rows(alone, loaded)


class StreamHold:
    """(c)'s burst: a fresh run of A waiting at an approval gate, and bench/sse_fanout.py's subscriber
    opening `n` streams on its events over `keys` (stream i on key i mod len) and holding every one
    the host accepts; on exit the run is cancelled (its terminal event ends every stream) and the
    subscriber's report says how many were refused."""

    def __init__(self, host: Host, keys: list[str], n: int) -> None:
        self.host, self.keys, self.n = host, keys, n
        self.result: dict[str, Any] = {}

    def __enter__(self) -> StreamHold:
        answers = send(self.host, keys=self.keys[:1], concurrency=1, bodies=[
            send_body(message_id=f"fair-streams-{uuid.uuid4()}", skill="conformance-approval", data=None,
                      immediately=False)])  # fmt: skip
        self.task_id = answers[0][2]
        if not self.task_id:
            raise RuntimeError(f"the approval run was not created: {answers[0]}")
        self._dir = tempfile.TemporaryDirectory(prefix="bench-fairness-streams-")
        port = self.host.base.rsplit(":", 1)[1]
        cmd = ["taskset", "-c", self.host.gen_cpus, sys.executable, str(BENCH / "sse_fanout.py"), "subscribe",
               "--port", port, "--path", f"/runs/{self.task_id}/events", "--keys", ",".join(self.keys),
               "--n", str(self.n), "--timeout", "900", "--report", f"{self._dir.name}/report.json"]  # fmt: skip
        started = time.monotonic()
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        ready = self.proc.stdout.readline().strip()
        self.result["open_s"] = round(time.monotonic() - started, 1)
        if ready != "ready":
            self._end()
            raise RuntimeError(f"the stream holder did not get its streams answered ({ready[:200]!r})")
        time.sleep(LEAD_S)
        return self

    def _end(self) -> None:
        send(self.host, keys=self.keys[:1], concurrency=1, bodies=[cancel_body(self.task_id)])
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def __exit__(self, *exc: object) -> None:
        self._end()
        report = Path(self._dir.name) / "report.json"
        doc = json.loads(report.read_text()) if report.exists() else {"failed_streams": self.n, "errors": ["no report"]}
        self._dir.cleanup()
        refused = int(doc["failed_streams"])
        self.result.update(attempted=self.n, held=self.n - refused, refused=refused, errors=doc.get("errors", [])[:3])


def paired(bench: Any, host: Host, scenario: str, target: str, load: Load,
           burst: Callable[[], contextlib.AbstractContextManager[Any]]) -> list[Any]:  # fmt: skip
    """B's GetTask alone and inside a fresh `burst()`, by turns (`Bench.point`); the bursts, in order."""
    made: list[Any] = []

    def around() -> contextlib.AbstractContextManager[Any]:
        made.append(burst())
        return made[-1]  # type: ignore[no-any-return]

    bench.point(scenario, B_CONNECTIONS, [(ALONE, load, host.servers), (target, load, host.servers)],
                around={target: around})  # fmt: skip
    return made


def _wrk_side(label: str, bursts: list[BackgroundWrk]) -> list[str]:
    lines = []
    for i, burst in enumerate(bursts):
        r = burst.result
        lines.append(f"repeat {i + 1}: A ({label}) answered {r['good']} ({r['good'] / r['wall_s']:.0f}/s), refused or "
                     f"bad {r['bad'] + r['socket_errors']} ({(r['bad'] + r['socket_errors']) / r['wall_s']:.0f}/s) in "
                     f"{r['wall_s']} s; its wrk {r['generator_cpu_pct']} % of a core; first refusal "
                     f"{r['first_bad'][:120]!r}")  # fmt: skip
    return lines


def _side_row(scenario: str, lines: list[str]) -> dict[str, Any]:
    return {"scenario": scenario, "target": "A's side per repeat", "connections": B_CONNECTIONS,
            "stdout": "\n".join(lines), "returncode": 0}  # fmt: skip


def list_load(host: Host, key: str) -> Load:
    """(d): ListTasks filtered by status and by a status timestamp every seeded run is after."""
    after = (dt.datetime.now(dt.UTC) - dt.timedelta(days=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
    params = {"status": "TASK_STATE_COMPLETED", "statusTimestampAfter": after, "pageSize": 50}
    body = json.dumps({"jsonrpc": "2.0", "id": "{{N}}", "method": "ListTasks", "params": params})
    return Load(url=f"{host.base}/a2a/jsonrpc", body=body, headers=host.headers(key), ok_marker=LIST_PAGE_MARKER)


def _list_probe(load: Load) -> str:
    """One page of (d) before it is measured: what its total says (exact, or bounded where the host bounds it)."""
    import httpx

    answer = httpx.post(load.url, content=load.body.replace("{{N}}", "probe"), timeout=60,
                        headers={**load.headers, "Content-Type": "application/json"})  # fmt: skip
    if LIST_PAGE_MARKER not in answer.text:
        raise RuntimeError(f"ListTasks of {TENANT_LIST} is not a full page: {answer.status_code} {answer.text[:300]}")
    total = answer.json()["result"].get("totalSize")
    bound = answer.headers.get("OpenWOP-Total-Size", "-")
    return f"A's filtered listing: totalSize {total}, OpenWOP-Total-Size {bound}"


def scenario(bench: Any, host: Host, *, wait_s: float) -> None:
    """(b), (c), (d), then (a); their rows are appended to bench.rows. BENCH_FAIRNESS_BURSTS (a comma
    list of flood, streams, list, runs; all by default) runs only some, to look at one closely."""
    bursts = set((os.environ.get("BENCH_FAIRNESS_BURSTS") or "flood,streams,list,runs").split(","))
    tenants = setup(host)
    b_load = host.gettask(host.base, tenants.tasks[TENANT_B], tenants.keys[TENANT_B][0])
    gen = host.gen_cpus
    if "flood" in bursts:
        _flood(bench, host, tenants, b_load, gen)
    if "streams" in bursts:
        _streams(bench, host, tenants, b_load)
    if "list" in bursts:
        _list(bench, host, tenants, b_load, gen)
    if "runs" in bursts:
        print(f"  fairness-runs: B's {B_RUNS} runs of {B_DELAY_MS} ms alone and after A queues {BACKLOG} of "
              f"{BACKLOG_DELAY_MS} ms; waited for at most {wait_s:.0f} s", flush=True)  # fmt: skip
        bench.rows.extend(runs_point(host, tenants, repeats=bench.repeats, wait_s=wait_s))


def _flood(bench: Any, host: Host, tenants: Tenants, b_load: Any, gen: Any) -> None:
    flood = dataclasses.replace(host.gettask(host.base, tenants.tasks[TENANT_FLOOD], "{{KEY}}"),
                                rotate=tuple(tenants.keys[TENANT_FLOOD]))  # fmt: skip
    floods = paired(bench, host, "fairness-flood", FLOODED, b_load, lambda: BackgroundWrk(
        flood, connections=FLOOD_CONNECTIONS, threads=2, cpus=gen, lead_s=LEAD_S))  # fmt: skip
    bench.rows.append(_side_row("fairness-flood", [tenants.budgets, *_wrk_side("GetTask", floods)]))


def _streams(bench: Any, host: Host, tenants: Tenants, b_load: Any) -> None:
    holds = paired(bench, host, "fairness-streams", STREAMING, b_load,
                   lambda: StreamHold(host, tenants.keys[TENANT_STREAMS], A_KEYS * (STREAMS_PER_KEY + 1)))  # fmt: skip
    bench.rows.append(_side_row("fairness-streams", [
        f"repeat {i + 1}: A's streams attempted {h.result['attempted']}, held {h.result['held']}, refused "
        f"{h.result['refused']} (answered in {h.result['open_s']} s); refusals {h.result['errors']}"
        for i, h in enumerate(holds)
    ]))  # fmt: skip


def _list(bench: Any, host: Host, tenants: Tenants, b_load: Any, gen: Any) -> None:
    listing = list_load(host, tenants.keys[TENANT_LIST][0])
    probe = _list_probe(listing)
    lists = paired(bench, host, "fairness-list", LISTING, b_load, lambda: BackgroundWrk(
        listing, connections=LIST_CONNECTIONS, threads=2, cpus=gen, lead_s=LEAD_S))  # fmt: skip
    bench.rows.append(_side_row("fairness-list", [probe, *_wrk_side("ListTasks", lists)]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="action", required=True)
    s = sub.add_parser("send", help="POST each body of --bodies (a JSON list), --concurrency at a time")
    s.add_argument("--url", required=True)
    s.add_argument("--headers", required=True, help="JSON object; {{KEY}} becomes the request's key")
    s.add_argument("--keys", required=True, help="comma list: request i uses key i mod len")
    s.add_argument("--concurrency", type=int, default=16)
    s.add_argument("--bodies", required=True)
    s.add_argument("--report", required=True, help="file the answers are written to, as JSON")
    send_main(parser.parse_args())


if __name__ == "__main__":
    main()
