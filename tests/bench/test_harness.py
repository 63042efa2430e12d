"""The bench harness itself (no timing asserts): wrk's Lua output is parsed, ratios and targets are
computed from sample rows, and the report writer produces the table and the chart."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

from harness import report  # noqa: E402
from harness.wrk import Load, WrkOutputError, parse_wrk_output, run_wrk  # noqa: E402

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
    assert doc["targets"][0] == {
        **doc["targets"][0],
        "connections": 16,
        "rps_ratio": 2.0,
        "p99_ratio": 0.5,
        "met": True,
    }
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

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"])).decode()
            seen.append(body)
            ok = self.headers.get("X-Bench") == "yes" and len(seen) % 2 == 0
            payload = b"GOOD" if ok else b"nope"
            self.send_response(200)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        load = Load(url=f"http://127.0.0.1:{server.server_port}/", body='{"id":"{{N}}"}', headers={"X-Bench": "yes"},
                    ok_marker="GOOD")  # fmt: skip
        result = run_wrk(load, connections=2, seconds=1, threads=2, cpus=_any_cpu())
    finally:
        server.shutdown()
    assert result["good"] + result["bad"] == result["requests"] > 2
    assert result["good"] > 0 and result["bad"] > 0
    assert len(set(seen)) == len(seen)  # every body unique, across both wrk threads too
    assert {body.split('"id":"')[1].split("-")[0] for body in seen} == {"1", "2"}
    assert 0 <= result["generator_cpu_pct"] <= 400


@pytest.mark.skipif(shutil.which("wrk") is None, reason="wrk is not installed (apt-get install wrk)")
def test_lua_script_gets_without_a_body_when_the_load_says_get() -> None:
    """The card scenario's load: GET, no body and no Content-Type sent, the marker still checked."""
    seen: list[tuple[str, str | None, str | None]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append((self.path, self.headers.get("Content-Length"), self.headers.get("Content-Type")))
            payload = b'{"skills":[]}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        load = Load(url=f"http://127.0.0.1:{server.server_port}/.well-known/agent-card.json", body="",
                    headers={"X-Bench": "yes"}, ok_marker='"skills"', method="GET")  # fmt: skip
        result = run_wrk(load, connections=2, seconds=1, threads=1, cpus=_any_cpu())
    finally:
        server.shutdown()
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
