"""bench/fairness.py (issue 49's bench) without timing: the clients' answers are counted by reason,
B's end-to-end times and their medians keep what is only a lower bound, and the fairness rows come
out as the report judges them (each target named "fairness", each a ratio to B alone in one run)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import Iterator
from email.message import Message
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import fairness  # noqa: E402
from harness import report  # noqa: E402
from harness.repeats import combine  # noqa: E402
from harness.wrk import BackgroundWrk, Load  # noqa: E402

from tests.bench.http_stub import answering  # noqa: E402
from tests.bench.test_harness import _any_cpu  # noqa: E402


def _error(code: int, budget: str | None = None) -> str:
    data = [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "RATE_LIMIT_EXCEEDED",
             "metadata": {"limit": "10", **({"budget": budget} if budget else {})}}]  # fmt: skip
    return json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": "no", "data": data}})


def test_answers_are_accepted_or_refused_by_reason() -> None:
    task = json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"task": {"id": "t/1", "status": {}}}})
    assert fairness.outcome(200, task) == ("t/1", "")
    cancelled = json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"id": "t/2", "status": {}}})  # CancelTask: a Task
    assert fairness.outcome(200, cancelled) == ("t/2", "")
    assert fairness.outcome(429, _error(-32000, "tenant.runs_queued")) == ("", "429 -32000 tenant.runs_queued")
    assert fairness.outcome(200, _error(-32002)) == ("", "200 -32002")
    assert fairness.outcome(503, "<html>busy</html>") == ("", "HTTP 503")
    assert fairness.outcome(200, json.dumps({"jsonrpc": "2.0", "id": 1})) == ("", "HTTP 200")


def test_the_backlog_is_counted_accepted_and_refused() -> None:
    answers = [[1.0, 200, "t/1", ""], [1.1, 429, "", "429 -32000 tenant.runs_queued"], [1.2, 200, "t/2", ""],
               [1.3, 429, "", "429 -32000 tenant.runs_queued"], [1.4, 0, "", "ConnectError"]]  # fmt: skip
    assert fairness.tally(answers) == {
        "sent": 5, "accepted": 2, "refused": {"429 -32000 tenant.runs_queued": 2, "ConnectError": 1}}  # fmt: skip
    assert fairness.tally([]) == {"sent": 0, "accepted": 0, "refused": {}}


def test_the_client_sends_every_body_over_the_keys_and_stamps_each_post() -> None:
    seen: list[tuple[str, dict]] = []

    def respond(path: str, headers: Message, body: bytes) -> bytes:
        doc = json.loads(body)
        seen.append((headers["Authorization"], doc))
        if doc["params"]["message"]["messageId"].endswith("-refused"):
            return _error(-32000, "tenant.runs_per_minute").encode()
        return json.dumps({"jsonrpc": "2.0", "id": doc["id"], "result": {"task": {"id": f"t/{len(seen)}"}}}).encode()

    bodies = [fairness.send_body(message_id=f"m{i}{'-refused' if i == 2 else ''}", skill="conformance-delay",
                                 data={"delayMs": 2000}, immediately=True) for i in range(4)]  # fmt: skip
    with answering(respond) as url:
        answers = asyncio.run(fairness._send_all(url, {"Authorization": "Bearer {{KEY}}", "A2A-Version": "1.0"},
                                                 ["k1", "k2"], bodies, 2))  # fmt: skip
    assert sorted(a for a, _ in seen) == ["Bearer k1", "Bearer k1", "Bearer k2", "Bearer k2"]
    assert [bool(a[2]) for a in answers] == [True, True, False, True]  # in the order of the bodies
    assert answers[2][3] == "200 -32000 tenant.runs_per_minute"
    assert all(isinstance(a[0], float) and a[0] > 0 for a in answers)
    message = seen[0][1]["params"]
    assert message["configuration"] == {"returnImmediately": True}
    assert message["message"]["metadata"] == {"openwop": {"skillId": "conformance-delay"}}
    assert {"data": {"delayMs": 2000}} in message["message"]["parts"]


def test_end_to_end_runs_from_the_post_to_completed_at_and_the_rest_are_lower_bounds() -> None:
    answers = [[100.0, 200, "b/1", ""], [100.5, 200, "b/2", ""], [101.0, 429, "", "429"], [101.5, 200, "b/4", ""]]
    finished = {"b/1": ("completed", 100.25), "b/2": ("pending", None), "b/4": ("failed", 102.0)}
    assert fairness.end_to_end(answers, finished, gave_up_at=130.0) == [
        (250.0, False), (29500.0, True), (29000.0, True), (28500.0, True)]  # fmt: skip


def test_a_median_is_a_lower_bound_when_a_middle_value_is() -> None:
    assert fairness.median_bound([(300.0, False), (100.0, False), (200.0, False)]) == (200.0, False)
    assert fairness.median_bound([(30000.0, True), (100.0, False), (200.0, False)]) == (200.0, False)
    assert fairness.median_bound([(30000.0, True), (31000.0, True), (200.0, False)]) == (30000.0, True)
    assert fairness.median_bound([(100.0, False), (30000.0, True)]) == (15050.0, True)  # even: the two middle
    assert fairness.median_bound([]) == (None, False)


def _runs_sample(times: list[tuple[float, bool]], *, loaded: bool) -> dict:
    sample = {"e2e": times, "b": {"sent": len(times), "accepted": len(times), "refused": {}},
              "cancel": {"sent": 0, "accepted": 0, "refused": {}}, "cancel_s": 0.0, "drained": True,
              "drain_s": 0.1}  # fmt: skip
    if loaded:
        sample.update(backlog={"sent": 2000, "accepted": 1500, "refused": {"429 -32000 tenant.runs_queued": 500}},
                      submit_s=12.5, a_status="completed 40, pending 1460",
                      cancel={"sent": 1460, "accepted": 1460, "refused": {}}, cancel_s=9.0)  # fmt: skip
    return sample


def _runs_verdict(rows: list[dict]) -> dict:
    return next(v for v in report.targets(rows) if v["target"].startswith("fairness: B's worker runs"))


def test_the_end_to_end_target_is_loaded_over_alone_and_a_bound_only_misses() -> None:
    alone = [_runs_sample([(150.0, False)] * 4, loaded=False), _runs_sample([(200.0, False)] * 4, loaded=False)]
    loaded = [_runs_sample([(400.0, False)] * 4, loaded=True), _runs_sample([(500.0, False)] * 4, loaded=True)]
    rows = fairness.runs_rows(alone, loaded)
    assert [r["target"] for r in rows] == [fairness.ALONE, fairness.QUEUED]
    assert rows[0]["e2e_ms"] == 175.0 and rows[1]["e2e_ms_runs"] == [400.0, 500.0]
    assert "A sent 2000 in 12.5 s: accepted 1500, refused {'429 -32000 tenant.runs_queued': 500}" in rows[1]["stdout"]
    assert "then cancelled 1460 unfinished runs" in rows[1]["stdout"]
    verdict = _runs_verdict(rows)
    assert verdict["value_ratio"] == 2.57 and verdict["value_ratio_range"] == [2.5, 2.67] and verdict["met"] is True

    stuck = [_runs_sample([(30000.0, True)] * 4, loaded=True)] * 2  # still queued when the bench stopped waiting
    verdict = _runs_verdict(fairness.runs_rows(alone, stuck))
    assert verdict["at_least"] is True and verdict["met"] is False  # >= 171x: a miss, written as one
    table = "\n".join(report.targets_table([verdict]))
    assert "| end to end >= 171.43 (150.0-200.0) | | **no** |" in table
    barely = [_runs_sample([(400.0, True)] * 4, loaded=True)] * 2  # a bound under 3x says nothing
    assert _runs_verdict(fairness.runs_rows(alone, barely))["met"] is None


def _point(target: str, scenario: str, rps: float, p99: float) -> dict:
    sample = {"rps": rps, "p50_ms": p99 / 3, "p99_ms": p99, "requests": 100, "good": 100, "bad": 0, "socket_errors": 0,
              "server_cpu_pct": 90.0, "infra_cpu_pct": 9.0, "generator_cpu_pct": 3.0, "server_max_rss_mb": 150.0,
              "first_bad": ""}  # fmt: skip
    return {**combine([sample]), "scenario": scenario, "target": target, "connections": fairness.B_CONNECTIONS}


def test_every_fairness_target_is_named_so_and_judges_the_rows_the_scenario_writes() -> None:
    import run

    assert "fairness" in run.SCENARIOS and "fairness" in run.QUICK["scenarios"]
    assert fairness.B_CONNECTIONS in report.FAIRNESS
    labels = [t[-1] for t in report.TARGETS + report.P99_TARGETS + report.VALUE_TARGETS if t[0].startswith("fairness")]
    assert len(labels) == 5 and all(label.startswith("fairness: ") for label in labels)
    loaded = {fairness.QUEUED, fairness.FLOODED, fairness.STREAMING, fairness.LISTING}
    judged = {t[1] for t in report.TARGETS + report.P99_TARGETS + report.VALUE_TARGETS if t[0].startswith("fairness")}
    assert judged == loaded

    rows = [
        _point(fairness.ALONE, "fairness-flood", 400.0, 20.0), _point(fairness.FLOODED, "fairness-flood", 300.0, 50.0),
        _point(fairness.ALONE, "fairness-streams", 400.0, 20.0),
        _point(fairness.STREAMING, "fairness-streams", 390.0, 30.0),
        _point(fairness.ALONE, "fairness-list", 400.0, 20.0), _point(fairness.LISTING, "fairness-list", 100.0, 90.0),
    ]  # fmt: skip
    verdicts = {v["target"]: v for v in report.targets(rows) if v["target"].startswith("fairness")}
    assert len(verdicts) == 4  # the end-to-end one needs its own rows
    flood_rps = verdicts["fairness: B's GetTask req/s while A floods GetTask (c=64, 16 keys) >= 0.67x alone"]
    assert flood_rps["rps_ratio"] == 0.75 and flood_rps["met"] is True
    assert verdicts["fairness: B's GetTask p99 while A floods GetTask (c=64, 16 keys) <= 2x alone"]["met"] is False
    assert verdicts["fairness: B's GetTask p99 while A holds its stream budget <= 2x alone"]["p99_ratio"] == 1.5
    listing = verdicts["fairness: B's GetTask p99 while A lists its 100k runs with filters (c=8) <= 2x alone"]
    assert listing["p99_ratio"] == 4.5 and listing["met"] is False
    assert not any(v["target"].startswith("memory") for v in report.targets(rows))  # B runs at c=4, not 64


def test_a_burst_runs_around_each_loaded_sample_only_alternating_with_alone() -> None:
    import run as bench_run

    order: list[str] = []

    class Recording(bench_run.Bench):
        def sample(self, load: Load, servers: list, connections: int, seconds: float | None = None) -> dict:
            order.append(load.url)
            return {**_point("x", "y", 100.0, 10.0), "server_max_rss_mb": 1.0}

    @contextlib.contextmanager
    def burst() -> Iterator[None]:
        order.append("A starts")
        yield
        order.append("A stops")

    bench = Recording(seconds=1, warmup=1, repeats=2)
    load = Load(url="B", body="", headers={})
    host = fairness.Host(base="http://h", servers=[], env={}, database_url="", redis_url="", queue="q", gen_cpus="0",
                         gettask=lambda *a: load, headers=lambda key: {}, create_task=lambda *a: "",
                         manage=lambda *a: "")  # fmt: skip
    made = fairness.paired(bench, host, "fairness-flood", fairness.FLOODED, load, burst)
    assert order == ["B", "A starts", "B", "A stops"] * 2
    assert len(made) == 2 and made[0] is not made[1]  # a fresh burst per loaded sample, for A's side
    assert [r["target"] for r in bench.rows] == [fairness.ALONE, fairness.FLOODED]
    assert {r["scenario"] for r in bench.rows} == {"fairness-flood"}


def test_the_list_load_filters_every_seeded_run_and_needs_a_full_page() -> None:
    host = fairness.Host(base="http://h", servers=[], env={}, database_url="", redis_url="", queue="q", gen_cpus="0",
                         gettask=lambda *a: None, headers=lambda key: {"Authorization": f"Bearer {key}"},  # type: ignore[arg-type,return-value]
                         create_task=lambda *a: "", manage=lambda *a: "")  # fmt: skip
    load = fairness.list_load(host, "k")
    params = json.loads(load.body)["params"]
    assert params["status"] == "TASK_STATE_COMPLETED" and params["statusTimestampAfter"].endswith("Z")
    assert load.ok_marker == '"nextPageToken"' and load.headers == {"Authorization": "Bearer k"}


def test_the_drain_counts_the_runs_queue_and_its_priority_lists_not_the_push_queue() -> None:
    names = ["openwop-bench", "openwop-bench\x06\x163", "openwop-bench-push", "_kombu.binding.openwop-bench",
             "openwop-benchmark"]  # fmt: skip
    assert fairness.queue_lists("openwop-bench", names) == ["openwop-bench", "openwop-bench\x06\x163"]


def test_a_background_load_reports_what_it_answered_in_its_window() -> None:
    """The burst beside B: wrk started, left running, stopped with SIGINT, its report parsed."""
    import shutil

    import pytest

    if shutil.which("wrk") is None:
        pytest.skip("wrk is not installed (apt-get install wrk)")

    def respond(path: str, headers: Message, body: bytes) -> bytes:
        return b"TASK_STATE_COMPLETED" if b'"id"' in body else b"no"

    with answering(respond) as url:
        load = Load(url=url, body='{"id": "{{N}}"}', headers={}, ok_marker="TASK_STATE_COMPLETED")
        with BackgroundWrk(load, connections=2, threads=1, cpus=_any_cpu(), lead_s=0.5) as burst:
            pass
    assert burst.result["good"] > 0 and burst.result["bad"] == 0
    assert burst.result["wall_s"] >= 0.5 and burst.result["generator_cpu_s"] >= 0
