"""The upgrade test's own pieces (scripts/upgrade_test.py) fail when they should: a 500 or a
JSON-RPC error counts as an error, a request over 2 s trips the slow check, a release missing from
the history stops it with a clear message, a phase's p99 is the 99th percentile."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def harness() -> ModuleType:
    spec = importlib.util.spec_from_file_location("upgrade_test", ROOT / "scripts" / "upgrade_test.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["upgrade_test"] = module  # dataclasses resolve their module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def door() -> Iterator[str]:
    """A loopback server answering like a host that fails: POST /runs 500, JSON-RPC with an error
    object (HTTP 200), GET /runs/... 200."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if self.path == "/runs":
                self._answer(500, b'{"error": "internal"}')
            else:
                self._answer(200, json.dumps({"jsonrpc": "2.0", "id": 1, "error": {"code": -32603}}).encode())

        def do_GET(self) -> None:
            self._answer(200, b"{}")

        def _answer(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


def test_a_500_and_a_jsonrpc_error_are_errors_and_a_200_is_not(harness: ModuleType, door: str) -> None:
    user = harness.User("acme", "owk_test", ["acme/run-0000000000000000"])
    load = harness.Load([user], harness.Targets(web=[door], grpc=[]), harness.Recorder())

    async def ask(op: str) -> tuple[bool, str]:
        async with httpx.AsyncClient(timeout=5) as client:
            return await load.request(op, user, door, client, {}, None, 1)

    assert asyncio.run(ask("rest_create")) == (False, "HTTP 500")
    ok, detail = asyncio.run(ask("a2a_send"))
    assert not ok and "JSON-RPC error" in detail and "-32603" in detail
    assert asyncio.run(ask("rest_get")) == (True, "HTTP 200")


def test_the_verdict_counts_errors_and_trips_on_a_slow_request(harness: ModuleType) -> None:
    recorder = harness.Recorder()
    recorder.begin("migrate")
    recorder.record("migrate", "a2a_get", 0.010, True)
    assert recorder.verdict() == []
    recorder.record("migrate", "rest_create", 0.020, False, "HTTP 500")
    recorder.record("migrate", "grpc_get", harness.SLOW_SECONDS + 0.1, True)
    verdict = recorder.verdict()
    assert verdict[0].startswith("1 errors (first: rest_create in migrate: HTTP 500)")
    assert verdict[1].startswith("1 requests slower than 2 s (slowest: grpc_get in migrate")
    (summary,) = recorder.summaries()
    assert (summary.requests, summary.errors, summary.slowest_op) == (3, 1, "grpc_get")
    assert "migrate" in recorder.table()
    assert harness.Recorder().verdict() == ["no request was sent"]  # a test that sent nothing passes nothing


def test_p99_is_the_nearest_rank(harness: ModuleType) -> None:
    assert harness.p99([]) == 0.0
    assert harness.p99([float(n) for n in range(1, 101)]) == 99.0
    assert harness.p99([float(n) for n in range(1, 1001)]) == 990.0
    assert harness.p99([5.0]) == 5.0


def test_a_release_missing_from_the_history_stops_it_clearly(harness: ModuleType, tmp_path: Path) -> None:
    named = tmp_path / "upgrade-from"
    named.write_text('version = "0.18.0"\ncommit = "' + "0" * 40 + '"\n')
    with pytest.raises(harness.UpgradeTestError, match="not in this repository's history"):
        harness.release_from(named)
    shipped = harness.release_from()  # the file in deploy/: its commit is in this history
    assert len(shipped.commit) == 40


def test_constraints_keep_pins_and_markers_not_hashes(harness: ModuleType, tmp_path: Path) -> None:
    lock = tmp_path / "main.lock"
    lock.write_text(
        "# header\ndjango==5.2.20 \\\n    --hash=sha256:00\n    # via x\nuvloop==0.21 ; sys_platform != 'win32' \\\n"
    )
    out = harness._constraints_from_lock(lock, tmp_path / "c.txt")
    assert out.read_text() == "django==5.2.20\nuvloop==0.21 ; sys_platform != 'win32'\n"
