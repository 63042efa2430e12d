"""The bench harness itself (no timing asserts): wrk's Lua output is parsed, ratios and targets are
computed from sample rows, and the report writer produces the table and the chart."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from email.message import Message
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

from harness import report  # noqa: E402
from harness.repeats import combine, ratio_range  # noqa: E402
from harness.wrk import Load, WrkOutputError, parse_wrk_output, run_wrk  # noqa: E402

from tests.bench.http_stub import answering  # noqa: E402

SAMPLE = (
    "Running 2s test @ http://127.0.0.1:1/a2a/jsonrpc\n  1 threads and 4 connections\n"
    'BENCH_JSON {"requests":1000,"duration_us":2000000,"bytes":50000,"good":990,"bad":10,'
    '"errors":{"connect":0,"read":1,"write":0,"status":10,"timeout":2},'
    '"latency_us":{"min":300,"mean":1500.5,"max":9000,"p50":1200,"p90":2500,"p99":7000,"p999":8800},'
    '"first_bad":"500 {\\"error\\": 1}"}\n'
)


def row(scenario: str, target: str, c: int, rps: float, p99: float, rss: float = 100.0) -> dict:
    return {
        "scenario": scenario, "target": target, "connections": c, "rps": rps, "p50_ms": p99 / 3, "p99_ms": p99,
        "bad": 0, "socket_errors": 0, "server_cpu_pct": 90.0, "server_max_rss_mb": rss, "generator_cpu_pct": 4.0,
        "first_bad": "",
    }  # fmt: skip


def test_wrk_output_is_parsed_and_only_good_responses_count() -> None:
    result = parse_wrk_output(SAMPLE)
    assert result["requests"] == 1000 and result["good"] == 990 and result["bad"] == 10
    assert result["rps"] == 495.0  # 990 good / 2 s, not 1000 / 2
    assert (result["p50_ms"], result["p99_ms"], result["p999_ms"]) == (1.2, 7.0, 8.8)
    assert result["socket_errors"] == 3
    assert result["first_bad"] == '500 {"error": 1}'


def test_wrk_output_without_the_marker_is_an_error() -> None:
    with pytest.raises(WrkOutputError):
        parse_wrk_output("Running 2s test\nunable to connect to 127.0.0.1:1 Connection refused\n")


def test_ratios_are_ours_over_the_peer_and_variants_over_the_first_line() -> None:
    rows = [
        row("gettask", "ours (uvicorn x2)", 16, 300.0, 40.0),
        row("gettask", "a2a-sdk postgres", 16, 200.0, 50.0),
        row("asgi", "daphne x1", 16, 100.0, 80.0),
        row("asgi", "uvicorn x2", 16, 150.0, 40.0),
    ]
    rated = {(r["scenario"], r["target"]): r for r in report.ratios(rows)}
    assert rated[("gettask", "a2a-sdk postgres")]["rps_ratio"] == 1.5
    assert rated[("gettask", "a2a-sdk postgres")]["p99_ratio"] == 0.8
    assert "rps_ratio" not in rated[("gettask", "ours (uvicorn x2)")]
    assert rated[("asgi", "uvicorn x2")]["rps_ratio"] == 1.5 and rated[("asgi", "uvicorn x2")]["vs"] == "daphne x1"


def test_targets_need_both_throughput_and_p99() -> None:
    rows = [
        row("gettask", "ours", 16, 300.0, 40.0),
        row("gettask", "a2a-sdk postgres", 16, 200.0, 50.0),  # 1.5x, p99 better: met
        row("gettask", "ours", 64, 300.0, 90.0, rss=350.0),
        row("gettask", "a2a-sdk postgres", 64, 100.0, 50.0),  # 3x but p99 worse: not met
    ]
    verdicts = {(v["target"], v["connections"]): v["met"] for v in report.targets(rows)}
    label = report.TARGETS[0][5]
    assert verdicts[(label, 16)] is True
    assert verdicts[(label, 64)] is False
    rows.append(row("sendmessage", "ours", 16, 5.0, 900.0))
    rows.append(row("sendmessage", "a2a-sdk postgres", 16, 0.0, 0.0))  # nothing completed: no verdict either way
    assert verdicts.get((report.TARGETS[1][5], 16)) is None
    assert {(v["target"], v["connections"]): v["met"] for v in report.targets(rows)}[(report.TARGETS[1][5], 16)] is None
    memory = next(v for v in report.targets(rows) if "max_rss_mb" in v)
    assert memory["max_rss_mb"] == 350.0 and memory["met"] is False


def _sample() -> tuple[dict, list[dict]]:
    rows = [row("gettask", "ours (uvicorn x2)", c, 100.0 * c, 10.0) for c in (1, 16)]
    rows += [row("gettask", "a2a-sdk postgres", c, 50.0 * c, 20.0) for c in (1, 16)]
    meta = {
        "date": "2026-01-01T00:00:00+00:00", "command": "bench/run.py --quick", "server_cpus": "1",
        "generator_cpus": "0", "ours": "ours (uvicorn x2)", "seconds": 2, "warmup": 1,
        "machine": {"cpus": 2, "platform": "Linux", "python": "3.11", "load_avg_at_end": (1.0, 1.0, 1.0)},
    }  # fmt: skip
    return meta, rows


def test_report_writes_json_and_table(tmp_path: Path) -> None:
    meta, rows = _sample()
    path = report.write(meta, rows, tmp_path, name="sample")
    doc = json.loads(path.read_text())
    assert len(doc["rows"]) == 4
    by_level = {v["connections"]: v for v in doc["targets"] if v["target"] == report.TARGETS[0][5]}
    assert sorted(by_level) == [1, 16]  # c=1 is judged too, not left out of the headline
    assert by_level[16] == {**by_level[16], "rps_ratio": 2.0, "p99_ratio": 0.5, "met": True}
    table = path.with_suffix(".md").read_text()
    assert "| a2a-sdk postgres | 16 | 800.0 | " in table and "| 2.0 | 0.5 |" in table
    assert "## Targets" in table
    assert report.cpu_ms_per_request(rows[0]) == 9.0  # 90 % of a core / 100 req/s


def test_report_chart_is_a_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="matplotlib comes with the bench extra (pip install -e '.[bench]')")
    meta, rows = _sample()
    path = report.write(meta, rows, tmp_path, name="sample")
    assert path.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.skipif(shutil.which("wrk") is None, reason="wrk is not installed (apt-get install wrk)")
def test_lua_script_against_a_live_server_counts_good_and_bad() -> None:
    """post.lua end to end: unique {{N}} per request, headers sent, the success marker checked."""
    seen: list[str] = []

    def respond(path: str, headers: Message, body: bytes) -> bytes:
        seen.append(body.decode())
        return b"GOOD" if headers.get("X-Bench") == "yes" and len(seen) % 2 == 0 else b"nope"

    with answering(respond) as url:
        load = Load(url=url, body='{"id":"{{N}}"}', headers={"X-Bench": "yes"}, ok_marker="GOOD")
        result = run_wrk(load, connections=2, seconds=1, threads=2, cpus=_any_cpu())
    assert result["good"] + result["bad"] == result["requests"] > 2
    assert result["good"] > 0 and result["bad"] > 0
    assert len(set(seen)) == len(seen)  # every body unique, across both wrk threads too
    assert {body.split('"id":"')[1].split("-")[0] for body in seen} == {"1", "2"}
    assert 0 <= result["generator_cpu_pct"] <= 400


@pytest.mark.skipif(shutil.which("wrk") is None, reason="wrk is not installed (apt-get install wrk)")
def test_lua_script_gets_without_a_body_when_the_load_says_get() -> None:
    """The card scenario's load: GET, no body and no Content-Type sent, the marker still checked."""
    seen: list[tuple[str, str | None, str | None]] = []

    def respond(path: str, headers: Message, body: bytes) -> bytes:
        seen.append((path, headers.get("Content-Length"), headers.get("Content-Type")))
        return b'{"skills":[]}'

    with answering(respond) as url:
        load = Load(url=f"{url}.well-known/agent-card.json", body="", headers={"X-Bench": "yes"}, ok_marker='"skills"',
                    method="GET")  # fmt: skip
        result = run_wrk(load, connections=2, seconds=1, threads=1, cpus=_any_cpu())
    assert result["good"] == result["requests"] > 2 and result["bad"] == 0
    assert set(seen) == {("/.well-known/agent-card.json", None, None)}


def test_the_listpage_and_card_scenarios_are_registered_with_their_targets() -> None:
    import run

    for name in ("listpage", "card"):
        assert name in run.SCENARIOS and name in run.QUICK["scenarios"]
        assert any(t[0] == name and t[1] == "a2a-sdk postgres" and t[2] == 1.5 for t in report.TARGETS)
    page = run.listpage_load("http://h", "k")
    assert json.loads(page.body)["params"] == {"pageSize": 20} and page.method == "POST"
    assert page.ok_marker == '"nextPageToken"' and page.headers["Authorization"] == "Bearer k"
    assert "Authorization" not in run.listpage_load("http://h", None).headers  # the peer: unauthenticated
    card = run.card_load("http://h")
    assert (card.method, card.body, card.url) == ("GET", "", "http://h/.well-known/agent-card.json")
    rows = [row("listpage", "ours", 16, 450.0, 60.0), row("listpage", "a2a-sdk postgres", 16, 100.0, 200.0),
            row("card", "ours", 64, 3000.0, 9.0), row("card", "a2a-sdk postgres", 64, 2500.0, 5.0)]  # fmt: skip
    verdicts = {v["target"].split()[0]: v["met"] for v in report.targets(rows) if "rps_ratio" in v}
    assert verdicts == {"ListTasks": True, "public": False}  # the card at 1.2x; no p99 condition on either


def _any_cpu() -> str:
    out = subprocess.run(["taskset", "-pc", "0"], capture_output=True, text=True)  # the allowed list of pid 0
    return out.stdout.rsplit(":", 1)[-1].strip().split(",")[0] if out.returncode == 0 else "0"


def test_repeats_are_combined_into_medians_with_every_run_kept() -> None:
    samples = [
        {**row("gettask", "ours", 16, rps, p99), "bad": bad, "first_bad": fb}
        for rps, p99, bad, fb in ((300.0, 40.0, 0, ""), (100.0, 90.0, 2, "500 x"), (200.0, 50.0, 1, "503 y"))
    ]
    combined = combine(samples)
    assert combined["rps"] == 200.0 and combined["rps_runs"] == [300.0, 100.0, 200.0]
    assert combined["p99_ms"] == 50.0 and combined["p99_ms_runs"] == [40.0, 90.0, 50.0]
    assert combined["bad"] == 3 and combined["first_bad"] == "500 x" and combined["repeats"] == 3


def test_ratios_are_ratios_of_medians_with_the_per_repeat_range() -> None:
    ours = combine([row("gettask", "ours", 16, r, 10.0) for r in (300.0, 100.0, 200.0)])
    peer = combine([row("gettask", "a2a-sdk postgres", 16, r, 10.0) for r in (100.0, 100.0, 50.0)])
    rated = next(r for r in report.ratios([ours, peer]) if r["target"] == "a2a-sdk postgres")
    assert rated["rps_ratio"] == 2.0  # median 200 / median 100, not the mean of the ratios
    assert rated["rps_ratio_range"] == [1.0, 4.0]  # 100/100 and 200/50
    assert ratio_range([1.0], [0.0]) is None


def test_points_are_measured_interleaved() -> None:
    """ours, peer, ours, peer, ...: each repeat of every target back to back."""
    import run as bench_run

    order: list[str] = []

    class Recording(bench_run.Bench):
        def sample(self, load: Load, servers: list, connections: int) -> dict:
            order.append(load.url)
            return {**row("x", "y", connections, 100.0 + len(order), 10.0), "infra_cpu_pct": 1.0}

    bench = Recording(seconds=1, warmup=1, repeats=3)
    loads = [(name, Load(url=name, body="", headers={}, ok_marker="")) for name in ("ours", "peer")]
    bench.point("gettask", 16, [(name, load, []) for name, load in loads])
    assert order == ["ours", "peer"] * 3
    assert [r["target"] for r in bench.rows] == ["ours", "peer"]
    assert bench.rows[0]["rps_runs"] == [101.0, 103.0, 105.0]


def test_the_reference_peer_lists_exactly_the_seeded_tasks(monkeypatch: pytest.MonkeyPatch) -> None:
    """The peer's listing (its GetTask task included) is exactly BENCH_LIST_TASKS, as ours is."""
    from peers import a2a_reference
    from starlette.testclient import TestClient

    monkeypatch.setenv("BENCH_A2A_STORE", "memory")
    monkeypatch.setenv("BENCH_TASK_ID", "bench-get")
    monkeypatch.setenv("BENCH_LIST_TASKS", "7")
    body = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {"pageSize": 1}}
    with TestClient(a2a_reference.app_factory()) as client:
        answer = client.post("/a2a/jsonrpc", json=body, headers={"A2A-Version": "1.0"}).json()
    assert answer["result"]["totalSize"] == 7


def test_readme_section_states_every_miss(tmp_path: Path) -> None:
    meta, rows = _sample()
    rows.append(row("sendmessage", "ours (uvicorn x2)", 16, 90.0, 10.0))
    rows.append(row("sendmessage", "a2a-sdk postgres", 16, 100.0, 20.0))  # 0.9x: a miss
    results = report.write(meta, rows, tmp_path, name="sample")
    readme = tmp_path / "README.md"
    readme.write_text("# Bench\n\nprose kept\n")
    report.readme_update(readme, results)
    report.readme_update(readme, results)  # regenerated in place, not appended twice
    text = readme.read_text()
    assert text.count(report.README_BEGIN) == 1 and "prose kept" in text
    assert "| SendMessage >= 1.0x a2a-sdk (PostgreSQL), p99 no worse | 16 | 0.9 | 0.5 | **no** |" in text
    assert "**1 of 3 targets missed.**" in text


def test_the_make_run_host_is_judged_against_the_durable_peer() -> None:
    """Issue 35's newcomer target: `ours (make run default)` / a2a-sdk postgres, while the peer's own
    ratio stays production ours / peer."""
    rows = [
        row("gettask", "ours (uvicorn x1)", 16, 600.0, 10.0),
        row("gettask", "a2a-sdk postgres", 16, 200.0, 20.0),
        row("gettask", "ours (make run default)", 16, 100.0, 40.0),
    ]
    rated = {r["target"]: r for r in report.ratios(rows)}
    assert rated["a2a-sdk postgres"]["rps_ratio"] == 3.0
    assert rated["ours (make run default)"]["rps_ratio"] == 0.5
    verdict = next(v for v in report.targets(rows) if v["target"].startswith("make run default"))
    assert verdict["rps_ratio"] == 0.5 and verdict["met"] is False
