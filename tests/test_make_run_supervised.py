"""`make run` as a newcomer runs it (no DATABASE_URL, no REDIS_URL), in a fresh clone under a fresh
folder tree deep enough that var/pg is too long a path for a unix socket:

- no folder above the checkout changes mode; var/ and everything in it (the embedded PostgreSQL,
  its password, the demo key, the broker, beat's schedule, the logs, an `audit_export` to a
  file:// archive) is this user's only: folders 0700, files 0600;
- a second `make run` in the same checkout is refused, naming the first one's pid;
- a SIGKILLed worker is started again, with a line on the terminal;
- a SIGKILLed embedded PostgreSQL turns every door's answer into a 503 with Retry-After (REST,
  A2A JSON-RPC and HTTP+JSON and gRPC, MCP, the console), never a 500, until the supervisor starts
  it again; then every door answers as before;
- Ctrl-C stops every process and the embedded server.
The supervisor is paused (SIGSTOP) while the server is down, so the 503s are seen for certain.
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from a2a.types import ListTasksRequest, a2a_pb2_grpc

from openwop_host.embedded_postgres import SOCKET_NAME, SOCKET_PATH_MAX
from tests.live import free_port, wait_until
from tests.test_fresh_clone import _clean_env, _clone
from tests.test_make_run import _console_scripts, _needs_make

START_TIMEOUT = 900  # a fresh clone's make setup initialises and migrates a new embedded PostgreSQL first
MCP_META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}


def _processes(pgid: int) -> list[tuple[int, str]]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid and fields[0] != "Z":
                command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
                if command:
                    found.append((int(entry.name), command))
    return found


def _pid_of(pgid: int, needle: str) -> int | None:
    """The pid of the process whose command line has `needle`: a child is the process itself, not
    the shell make ran nor the supervisor (whose own arguments hold every child's command line)."""
    for pid, command in _processes(pgid):
        supervisor = "openwop_host.supervise" in command
        if needle in command and not command.startswith("/bin/sh") and supervisor == ("supervise" in needle):
            return pid
    return None


def _modes(paths: list[Path]) -> dict[str, int]:
    return {str(path): stat.S_IMODE(path.stat().st_mode) for path in paths}


@pytest.fixture
def deep_tree() -> Iterator[Path]:
    """/tmp/openwop-mr-*/<long>/<long>: modes 0751, 0700, 0755 (as a home under /home or /root)."""
    top = Path(tempfile.mkdtemp(prefix="openwop-mr-"))
    middle, bottom = top / ("deep-folder-" * 4), top / ("deep-folder-" * 4) / ("checkouts-" * 3)
    bottom.mkdir(parents=True)
    for path, mode in ((top, 0o751), (middle, 0o700), (bottom, 0o755)):
        path.chmod(mode)
    yield bottom
    subprocess.run(["rm", "-rf", str(top)], check=False)


class Doors:
    """One request through each door, as the demo tenant."""

    def __init__(self, base: str, grpc_target: str, key: str) -> None:
        self.base, self.grpc_target, self.key = base, grpc_target, key
        self.bearer = {"Authorization": f"Bearer {key}"}

    def answers(self) -> dict[str, tuple[int, dict[str, str], Any]]:
        with httpx.Client(base_url=self.base, timeout=60) as http:
            a2a = {**self.bearer, "A2A-Version": "1.0"}
            mcp = {**self.bearer, "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/list",
                   "Accept": "application/json, text/event-stream"}  # fmt: skip
            http.get("/console/login/")  # its CSRF cookie
            token = http.cookies.get("csrftoken") or ""
            responses = {
                "rest GET /runs": http.get("/runs", headers=self.bearer),
                "rest POST /runs": http.post("/runs", headers=self.bearer,
                                             json={"workflowId": "conformance-noop", "inputs": {}}),
                "a2a jsonrpc": http.post("/a2a/jsonrpc", headers=a2a,
                                         json={"jsonrpc": "2.0", "id": 7, "method": "ListTasks", "params": {}}),
                "a2a http+json": http.get("/a2a/rest/tasks", headers=a2a),
                "mcp": http.post("/mcp", headers=mcp, json={"jsonrpc": "2.0", "id": 8, "method": "tools/list",
                                                           "params": {"_meta": MCP_META}}),
                "console": http.post("/console/login/", headers={"X-CSRFToken": token},
                                     data={"username": "nobody", "password": "wrong", "csrfmiddlewaretoken": token}),
            }  # fmt: skip
        answers: dict[str, tuple[int, dict[str, str], Any]] = {}
        for name, response in responses.items():
            body: Any = response.json() if "json" in response.headers.get("content-type", "") else response.text
            answers[name] = (response.status_code, dict(response.headers), body)
        with grpc.insecure_channel(self.grpc_target) as channel:
            try:
                a2a_pb2_grpc.A2AServiceStub(channel).ListTasks(
                    ListTasksRequest(), metadata=(("authorization", f"Bearer {self.key}"), ("a2a-version", "1.0")),
                    timeout=60,
                )  # fmt: skip
                answers["a2a grpc"] = (200, {}, "OK")
            except grpc.RpcError as exc:
                answers["a2a grpc"] = (0, {}, exc.code().name)
        return answers


def _all_served(answers: dict[str, tuple[int, dict[str, str], Any]]) -> bool:
    # The console's wrong password is a served answer too (its page again, 200; or its throttle's 429).
    return all(
        status in (200, 201) or (name == "console" and status in (200, 429)) for name, (status, _, _) in answers.items()
    )


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_make_run_keeps_secrets_private_watches_its_processes_and_answers_503_without_its_database(
    deep_tree: Path, tmp_path: Path
) -> None:
    _needs_make()
    clone = deep_tree / "openwop-host"
    clone.mkdir()
    _clone(clone)
    _console_scripts(clone)
    assert len(os.fsencode(clone / "var" / "pg" / SOCKET_NAME)) > SOCKET_PATH_MAX  # the socket goes elsewhere
    above = [clone, *clone.parents]
    modes_before = _modes(above)
    port, grpc_port = free_port(), free_port()
    base = f"http://127.0.0.1:{port}"
    env = _clean_env(tmp_path / "home")
    log_path = tmp_path / "make-run.log"
    log = log_path.open("w")
    make = subprocess.Popen(["make", "run", f"PORT={port}", f"GRPC_PORT={grpc_port}"], cwd=clone, env=env,
                            stdout=log, stderr=subprocess.STDOUT, text=True, start_new_session=True)  # fmt: skip

    def said() -> str:
        return log_path.read_text(errors="replace")

    def ready() -> bool:
        assert make.poll() is None, said()[-4000:]
        with contextlib.suppress(httpx.HTTPError):
            return httpx.get(f"{base}/readyz", timeout=10).status_code == 200
        return False

    try:
        wait_until(ready, f"make run became ready:\n{said()[-3000:]}", timeout=START_TIMEOUT)
        assert "embedded PostgreSQL under var/pg" in said()
        supervisor = _pid_of(make.pid, "openwop_host.supervise")
        assert supervisor is not None, _processes(make.pid)

        # One make run per checkout.
        second = subprocess.run(["make", "run", f"PORT={free_port()}", f"GRPC_PORT={free_port()}"], cwd=clone,
                                env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
        assert second.returncode != 0
        assert f"this checkout's host is already running (make run, pid {supervisor};" in second.stdout, second.stdout

        # What the host wrote is this user's only; an export to a file:// archive under var/ too.
        until = datetime.now(UTC).isoformat()
        exported = subprocess.run(
            [str(clone / ".venv/bin/python"), "manage.py", "audit_export", "--tenant", "demo", "--until", until,
             "--to", f"file://{clone}/var/archive"],
            cwd=clone, env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert exported.returncode == 0, exported.stderr
        var = clone / "var"
        for name in ("pg-password", "demo-api-key", "worker.log", "beat.log", "grpc.log", "run.lock"):
            assert stat.S_IMODE((var / name).stat().st_mode) == 0o600, name
        assert list(var.glob("celerybeat-schedule*")) and list((var / "archive").rglob("*.jsonl.gz"))
        assert stat.S_IMODE(var.stat().st_mode) == 0o700
        loose = [
            f"{oct(stat.S_IMODE(path.lstat().st_mode))} {path.relative_to(var)}"
            for path in var.rglob("*")
            if stat.S_IMODE(path.lstat().st_mode) & 0o077
        ]
        assert loose == []  # nothing under var/ any other account may read, write or enter
        pg_pid, socket_dir = (lambda lines: (int(lines[0]), Path(lines[4])))(
            (var / "pg/postmaster.pid").read_text().splitlines()
        )
        assert socket_dir.parent == Path(tempfile.gettempdir())
        assert stat.S_IMODE(socket_dir.stat().st_mode) == 0o700 and socket_dir.stat().st_uid == os.geteuid()

        doors = Doors(base, f"127.0.0.1:{grpc_port}", (var / "demo-api-key").read_text().strip())
        assert _all_served(answers := doors.answers()), answers

        # A killed worker is started again, and says so.
        worker = _pid_of(make.pid, "celery -A openwop_host worker")
        assert worker is not None
        os.kill(worker, signal.SIGKILL)
        again = wait_until(lambda: (pid := _pid_of(make.pid, "celery -A openwop_host worker")) != worker and pid,
                           "the worker was started again", timeout=120)  # fmt: skip
        assert "make run: worker exited (code -9" in said() and f"worker started again (pid {again})" in said()

        # A killed database: 503 with Retry-After on every door, in its own wire; never a 500.
        os.kill(supervisor, signal.SIGSTOP)
        try:
            os.kill(pg_pid, signal.SIGKILL)
            answers = doors.answers()
            assert {name: answer[0] for name, answer in answers.items()} == {
                "rest GET /runs": 503, "rest POST /runs": 503, "a2a jsonrpc": 503, "a2a http+json": 503, "mcp": 503,
                "console": 503, "a2a grpc": 0,
            }, answers  # fmt: skip
            assert answers["a2a grpc"][2] == "UNAVAILABLE"
            for name, (_, headers, _) in answers.items():
                assert name == "a2a grpc" or headers.get("retry-after") == "1", (name, headers)
            assert answers["rest GET /runs"][2]["error"] == "openwop-host.overloaded"
            assert answers["a2a jsonrpc"][2]["id"] == 7 and answers["a2a jsonrpc"][2]["error"]["code"] == -32603
            assert answers["a2a http+json"][2]["error"]["status"] == "UNAVAILABLE"
            assert answers["mcp"][2]["error"]["data"] == {"reason": "overloaded"}
            assert "cannot reach its database" in answers["console"][2]
        finally:
            os.kill(supervisor, signal.SIGCONT)
        # The supervisor starts it again; every door answers as before.
        wait_until(lambda: _all_served(doors.answers()), "every door answered again", timeout=180)
        assert "make run: the embedded PostgreSQL stopped; starting it again" in said()
        assert "the embedded PostgreSQL is running again" in said()

        # Ctrl-C, as a terminal sends it: every process ends, and the embedded server with them.
        os.killpg(make.pid, signal.SIGINT)
        wait_until(lambda: not _processes(make.pid), "every make run process ended", timeout=120)
        assert make.wait(timeout=30) is not None
        assert not (var / "pg/postmaster.pid").exists()
        assert not socket_dir.exists()  # its private socket folder goes with it
        assert _modes(above) == modes_before  # no folder above the checkout changed mode
    finally:
        if make.poll() is None or _processes(make.pid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(make.pid, signal.SIGCONT)
                os.killpg(make.pid, signal.SIGKILL)  # only the group this test started
        make.wait(timeout=60)
        log.close()
        pid_file = clone / "var/pg/postmaster.pid"
        if pid_file.exists():  # the server lives in a session of its own: stop it if the test failed
            with contextlib.suppress(ValueError, IndexError, ProcessLookupError, OSError):
                lines = pid_file.read_text().splitlines()
                os.kill(int(lines[0]), signal.SIGKILL)
                subprocess.run(["rm", "-rf", lines[4]], check=False)  # its private socket folder
