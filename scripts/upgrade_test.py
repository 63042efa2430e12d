"""`make upgrade-test`: this release upgrades the one named in deploy/upgrade-from while it serves.

1. The previous release is taken from this repository's own history (`git archive` of the commit
   in deploy/upgrade-from, under var/upgrade-test/, outside the work tree's files) and installed in
   a virtualenv of its own (its lock file if it has one, else its pyproject with this release's
   lock as constraints). A commit missing from the history fails here, saying so.
2. A database of its own is migrated by that release and seeded: tenants and keys, template runs
   through its doors (REST, A2A, MCP), push configs with sealed credentials, an approval waiting;
   records through its own writer (scripts/upgrade_seed.py) spread over UPGRADE_TEST_DAYS days;
   the ended runs cloned in SQL (generate_series) to UPGRADE_TEST_RUNS with their events. Its
   `audit_verify` must find the chain intact before anything else happens.
3. Its web process, gRPC server and worker serve a steady mixed load (A2A JSON-RPC SendMessage and
   GetTask, gRPC SendMessage and GetTask, MCP tools/call, REST create and read) from
   UPGRADE_TEST_USERS clients, each with its own key, while this release's `migrate` runs; then this
   release's processes replace the old ones one at a time (a new one started and ready, traffic
   moved to it, the old one drained and stopped: web, then gRPC, then the worker), and the
   post-deploy backfills run to the end (`manage.py backfill`) under the same load.
4. It prints, per phase, the requests, the errors, the slowest request and the p99; and the checks:
   the waiting approval resumes on the new release, the sealed credentials open there,
   `audit_verify` (the new release's) is intact. It exits 0 only with 0 errors, no request slower
   than 2 s and every check passed.

Environment: UPGRADE_TEST_DATABASE_URL (default: DATABASE_URL's server, database
`<its name>_upgrade`, dropped and created), UPGRADE_TEST_REDIS_URL (default: REDIS_URL's server,
db 13; flushed), UPGRADE_TEST_RECORDS (200000), UPGRADE_TEST_DAYS (35), UPGRADE_TEST_RUNS (20000),
UPGRADE_TEST_USERS (6), UPGRADE_TEST_STEADY_SECONDS (15: the old and the new release alone).
"""

# ruff: noqa: S603, S607 - every subprocess here is one of our own commands (git, tar, this host's), no shell

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import tomllib
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "var" / "upgrade-test"
UPGRADE_FROM = ROOT / "deploy" / "upgrade-from"
SLOW_SECONDS = 2.0  # no request may take longer, in any phase
REQUEST_TIMEOUT = 30.0
TENANTS = ("acme", "globex")
MCP_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}, "url": {}}},
}
SEALED = "upgrade-sealed-credential"  # push credentials seeded by the old release: "<SEALED>-<n>"


class UpgradeTestError(Exception):
    """The upgrade test cannot go on (a missing release, a process that did not start, a check)."""


# ---- the release to upgrade from ---------------------------------------------------------------


@dataclass(frozen=True)
class Release:
    version: str
    commit: str


def release_from(path: Path = UPGRADE_FROM, *, repository: Path = ROOT) -> Release:
    """The release deploy/upgrade-from names; its commit must be in this repository's history."""
    data = tomllib.loads(path.read_text())
    release = Release(version=str(data["version"]), commit=str(data["commit"]))
    found = subprocess.run(
        ["git", "-C", str(repository), "cat-file", "-e", f"{release.commit}^{{commit}}"], capture_output=True
    )
    if found.returncode != 0:
        raise UpgradeTestError(
            f"{path.name} names {release.version} at commit {release.commit}, which is not in this repository's "
            "history (a shallow clone? `git fetch --unshallow`); the upgrade test installs it from there"
        )
    return release


def old_tree(release: Release) -> Path:
    """The release's files (`git archive` of its commit) under var/upgrade-test/."""
    tree = WORK / f"{release.version}-{release.commit[:12]}" / "tree"
    if (tree / "manage.py").exists():
        return tree
    partial = tree.with_name("tree.partial")
    subprocess.run(["rm", "-rf", str(partial)], check=True)
    partial.mkdir(parents=True)
    archive = subprocess.Popen(["git", "-C", str(ROOT), "archive", release.commit], stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", str(partial)], stdin=archive.stdout, check=True)
    if archive.wait() != 0:
        raise UpgradeTestError(f"git archive {release.commit} failed")
    partial.rename(tree)
    return tree


def _constraints_from_lock(lock: Path, out: Path) -> Path:
    """This release's lock as a constraints file (pins and markers, no hashes)."""
    lines = []
    for line in lock.read_text().splitlines():
        if line and not line.startswith((" ", "#")):
            lines.append(line.rstrip(" \\"))
    out.write_text("\n".join(lines) + "\n")
    return out


def old_venv(release: Release, tree: Path) -> Path:
    """The release's own virtualenv (created once per release, kept under var/upgrade-test/)."""
    venv = tree.parent / "venv"
    stamp = venv / ".upgrade-test-installed"
    if stamp.exists():
        return venv
    subprocess.run(["rm", "-rf", str(venv)], check=True)
    log = (tree.parent / "install.log").open("w")
    uv = Path(sys.executable).parent / "uv"  # this release's lock has it (make lock): much faster than pip
    if uv.exists():
        subprocess.run([str(uv), "venv", "--quiet", "--python", sys.executable, str(venv)], check=True, stdout=log,
                       stderr=log)  # fmt: skip
        install = [str(uv), "pip", "install", "--quiet", "--python", str(venv / "bin" / "python")]
    else:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        install = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    own_lock = tree / "requirements" / "main.lock"
    if own_lock.exists():  # releases from 0.20.0 on ship their lock
        subprocess.run([*install, "--require-hashes", "--no-deps", "-r", str(own_lock)], check=True, stdout=log,
                       stderr=log)  # fmt: skip
        subprocess.run([*install, "--no-deps", "--no-build-isolation", "-e", str(tree)], check=True, stdout=log,
                       stderr=log)  # fmt: skip
    else:  # 0.19.0 imports a2a-sdk and mcp without declaring them outside its `test` extra
        constraints = _constraints_from_lock(ROOT / "requirements" / "main.lock", tree.parent / "constraints.txt")
        subprocess.run([*install, "-c", str(constraints), "-e", str(tree), "a2a-sdk", "mcp"], check=True, stdout=log,
                       stderr=log)  # fmt: skip
    stamp.touch()
    return venv


# ---- what the load measures --------------------------------------------------------------------


@dataclass(slots=True)
class Sample:
    phase: str
    op: str
    seconds: float
    ok: bool
    detail: str = ""


@dataclass
class PhaseSummary:
    name: str
    requests: int
    errors: int
    slowest: float
    slowest_op: str
    p99: float


def p99(values: list[float]) -> float:
    """The 99th percentile (nearest rank)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]


class Recorder:
    """Every request's outcome, placed in the phase it started in."""

    def __init__(self) -> None:
        self.phase = "setup"
        self.order: list[str] = []
        self.samples: list[Sample] = []
        self.errors: list[Sample] = []
        self.lock = threading.Lock()

    def begin(self, phase: str) -> None:
        with self.lock:
            self.phase = phase
            self.order.append(phase)
        print(f"upgrade-test: phase {phase}", flush=True)

    def record(self, phase: str, op: str, seconds: float, ok: bool, detail: str = "") -> None:
        sample = Sample(phase, op, seconds, ok, detail)
        with self.lock:
            self.samples.append(sample)
            if not ok:
                self.errors.append(sample)

    def summaries(self) -> list[PhaseSummary]:
        out = []
        for name in self.order:
            samples = [s for s in self.samples if s.phase == name]
            slowest = max(samples, key=lambda s: s.seconds, default=None)
            out.append(PhaseSummary(
                name=name, requests=len(samples), errors=sum(not s.ok for s in samples),
                slowest=slowest.seconds if slowest else 0.0, slowest_op=slowest.op if slowest else "-",
                p99=p99([s.seconds for s in samples]),
            ))  # fmt: skip
        return out

    def verdict(self) -> list[str]:
        """What fails the test (empty: the load passed)."""
        failed = []
        if self.errors:
            failed.append(f"{len(self.errors)} errors (first: {self.errors[0].op} in {self.errors[0].phase}: "
                          f"{self.errors[0].detail})")  # fmt: skip
        slow = [s for s in self.samples if s.seconds > SLOW_SECONDS]
        if slow:
            worst = max(slow, key=lambda s: s.seconds)
            failed.append(f"{len(slow)} requests slower than {SLOW_SECONDS:g} s (slowest: {worst.op} in "
                          f"{worst.phase}, {worst.seconds:.2f} s)")  # fmt: skip
        if not self.samples:
            failed.append("no request was sent")
        return failed

    def table(self) -> str:
        lines = [f"{'phase':<22}{'requests':>9}{'errors':>8}{'p99 ms':>9}{'slowest ms':>12}  slowest op"]
        for s in self.summaries():
            lines.append(f"{s.name:<22}{s.requests:>9}{s.errors:>8}{s.p99 * 1000:>9.0f}{s.slowest * 1000:>12.0f}  "
                         f"{s.slowest_op}")  # fmt: skip
        every = [s.seconds for s in self.samples]
        lines.append(f"{'all':<22}{len(every):>9}{len(self.errors):>8}{p99(every) * 1000:>9.0f}"
                     f"{max(every, default=0) * 1000:>12.0f}")  # fmt: skip
        return "\n".join(lines)


# ---- the load ----------------------------------------------------------------------------------


@dataclass
class Targets:
    """Where the load goes: the web processes and gRPC servers in service now (a balancer's view)."""

    web: list[str]
    grpc: list[str]
    in_flight: Counter[str] = field(default_factory=Counter)

    def pick(self, kind: str) -> str:
        return random.choice(self.web if kind == "web" else self.grpc)

    def drained(self, target: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while self.in_flight[target] and time.monotonic() < deadline:
            time.sleep(0.05)


@dataclass
class User:
    tenant: str
    key: str
    runs: list[str]  # ended runs of its tenant (bound ids)


OPS = ("a2a_send", "a2a_get", "grpc_send", "grpc_get", "mcp_call", "rest_create", "rest_get")


def _jsonrpc_ok(response: httpx.Response) -> tuple[bool, str]:
    if response.status_code != 200:
        return False, f"HTTP {response.status_code}"
    try:
        body = response.json()
    except ValueError:
        return False, "not JSON"
    if "result" not in body:
        return False, f"JSON-RPC error {json.dumps(body.get('error'))[:200]}"
    return True, ""


class Load:
    """UPGRADE_TEST_USERS clients in one event loop of their own thread, until stopped."""

    def __init__(self, users: list[User], targets: Targets, recorder: Recorder, *, pause: float = 0.02) -> None:
        self.users = users
        self.targets = targets
        self.recorder = recorder
        self.pause = pause
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=lambda: asyncio.run(self._main()), name="upgrade-load", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=REQUEST_TIMEOUT + 10)

    async def _main(self) -> None:
        import grpc

        channels: dict[str, Any] = {}
        async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT) as client:
            try:
                await asyncio.gather(*(self._user(user, client, channels, grpc) for user in self.users))
            finally:
                for channel in channels.values():
                    await channel.close()

    async def _user(self, user: User, client: httpx.AsyncClient, channels: dict[str, Any], grpc: Any) -> None:
        serial = 0
        while not self.stopping.is_set():
            serial += 1
            op = OPS[serial % len(OPS)]
            target = self.targets.pick("grpc" if op.startswith("grpc") else "web")
            phase = self.recorder.phase
            self.targets.in_flight[target] += 1
            started = time.monotonic()
            try:
                ok, detail = await self.request(op, user, target, client, channels, grpc, serial)
            except Exception as exc:
                ok, detail = False, f"{type(exc).__name__}: {str(exc)[:200]}"
            finally:
                self.targets.in_flight[target] -= 1
            self.recorder.record(phase, op, time.monotonic() - started, ok, detail)
            await asyncio.sleep(self.pause)

    async def request(self, op: str, user: User, target: str, client: httpx.AsyncClient, channels: dict[str, Any],
                      grpc: Any, serial: int) -> tuple[bool, str]:  # fmt: skip
        auth = {"Authorization": f"Bearer {user.key}"}
        if op.startswith("grpc"):
            return await self._grpc(op, user, target, channels, grpc, serial)
        if op == "a2a_send":
            message = {"messageId": f"upgrade-{uuid.uuid4().hex}", "role": "ROLE_USER", "parts": [{"text": "upgrade"}]}
            response = await client.post(
                f"{target}/a2a/jsonrpc",
                headers={**auth, "A2A-Version": "1.0"},
                json={"jsonrpc": "2.0", "id": serial, "method": "SendMessage", "params": {"message": message}},
            )
            return _jsonrpc_ok(response)
        if op == "a2a_get":
            response = await client.post(
                f"{target}/a2a/jsonrpc",
                headers={**auth, "A2A-Version": "1.0"},
                json={"jsonrpc": "2.0", "id": serial, "method": "GetTask", "params": {"id": random.choice(user.runs)}},
            )
            return _jsonrpc_ok(response)
        if op == "mcp_call":
            body = {
                "jsonrpc": "2.0",
                "id": serial,
                "method": "tools/call",
                "params": {"name": "echo", "arguments": {"greeting": "upgrade"}, "_meta": MCP_META},
            }
            response = await client.post(
                f"{target}/mcp",
                json=body,
                headers={**auth, "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "echo"},
            )
            return _jsonrpc_ok(response)
        if op == "rest_create":
            response = await client.post(
                f"{target}/runs", headers=auth, json={"workflowId": "echo", "inputs": {"n": serial}}
            )
            return response.status_code == 201, f"HTTP {response.status_code}"
        response = await client.get(f"{target}/runs/{random.choice(user.runs).replace('/', '~2F')}", headers=auth)
        return response.status_code == 200, f"HTTP {response.status_code}"

    async def _grpc(self, op: str, user: User, target: str, channels: dict[str, Any], grpc: Any,
                    serial: int) -> tuple[bool, str]:  # fmt: skip
        from a2a.types import a2a_pb2, a2a_pb2_grpc

        channel = channels.get(target)
        if channel is None:
            channel = channels[target] = grpc.aio.insecure_channel(target)
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        metadata = (("authorization", f"Bearer {user.key}"), ("a2a-version", "1.0"))
        try:
            if op == "grpc_get":
                await stub.GetTask(a2a_pb2.GetTaskRequest(id=random.choice(user.runs)), metadata=metadata,
                                   timeout=REQUEST_TIMEOUT)  # fmt: skip
            else:
                message = a2a_pb2.Message(message_id=f"upgrade-grpc-{uuid.uuid4().hex}", role=a2a_pb2.ROLE_USER,
                                          parts=[a2a_pb2.Part(text="upgrade")])  # fmt: skip
                await stub.SendMessage(a2a_pb2.SendMessageRequest(
                    message=message, configuration=a2a_pb2.SendMessageConfiguration(return_immediately=True)),
                    metadata=metadata, timeout=REQUEST_TIMEOUT)  # fmt: skip
        except grpc.aio.AioRpcError as error:
            return False, f"gRPC {error.code().name}: {error.details()}"
        return True, ""


# ---- processes ---------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Process:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (a graceful stop: in-flight requests and tasks finish), then SIGKILL."""
        if self.popen.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGTERM)
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(10)

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:]) if self.log.exists() else ""


@dataclass
class Side:
    """One release: where its code is and which Python runs it."""

    label: str  # "old" / "new"
    tree: Path
    bin: Path

    def python(self) -> str:
        return str(self.bin / "python")

    def manage(self, env: dict[str, str], *args: str, check: bool = True, timeout: float = 600) -> str:
        done = subprocess.run([self.python(), "manage.py", *args], cwd=self.tree, env=env, capture_output=True,
                              text=True, timeout=timeout)  # fmt: skip
        if check and done.returncode != 0:
            raise UpgradeTestError(f"{self.label} manage.py {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
        return done.stdout + done.stderr


class Processes:
    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.running: list[Process] = []

    def start(self, side: Side, name: str, command: list[str], env: dict[str, str]) -> Process:
        log = self.logs / f"{side.label}-{name}.log"
        handle = log.open("ab")
        popen = subprocess.Popen(command, cwd=side.tree, env=env, stdout=handle, stderr=subprocess.STDOUT,
                                 start_new_session=True)  # fmt: skip
        handle.close()
        process = Process(f"{side.label} {name}", popen, log)
        self.running.append(process)
        return process

    def web(self, side: Side, env: dict[str, str]) -> tuple[Process, str]:
        port = free_port()
        process = self.start(side, "web", [
            side.python(), "-m", "uvicorn", "openwop_host.asgi:application", "--host", "127.0.0.1", "--port",
            str(port), "--loop", "uvloop", "--http", "httptools", "--lifespan", "off", "--no-proxy-headers",
            "--no-access-log"], env)  # fmt: skip
        base = f"http://127.0.0.1:{port}"
        ready = f"{base}/readyz?scope=replica"
        _until(lambda: httpx.get(ready, timeout=2).status_code == 200, f"{process.name} ready", process)
        return process, base

    def grpc(self, side: Side, env: dict[str, str]) -> tuple[Process, str]:
        import grpc

        port = free_port()
        process = self.start(side, "grpc", [side.python(), "manage.py", "grpc_serve", "--bind", "127.0.0.1",
                                            "--port", str(port)], env)  # fmt: skip
        address = f"127.0.0.1:{port}"

        def ready() -> bool:
            with grpc.insecure_channel(address) as channel:
                grpc.channel_ready_future(channel).result(timeout=2)
            return True

        _until(ready, f"{process.name} ready", process)
        return process, address

    def worker(self, side: Side, env: dict[str, str]) -> Process:
        process = self.start(side, "worker", [
            side.python(), "-m", "celery", "-A", "openwop_host", "worker", "--pool", "threads", "--concurrency", "8",
            "--loglevel", "warning", "-n", f"upgrade-{side.label}@%h", "--without-gossip", "--without-mingle",
        ], env)  # fmt: skip
        time.sleep(3)  # a worker has no readiness endpoint; the runs it takes prove it
        if process.popen.poll() is not None:
            raise UpgradeTestError(f"{process.name} exited:\n{process.tail()}")
        return process

    def stop_all(self) -> None:
        for process in reversed(self.running):
            process.stop(timeout=15)


def _until(check: Callable[[], bool], what: str, process: Process | None = None, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.popen.poll() is not None:
            raise UpgradeTestError(f"{process.name} exited before {what}:\n{process.tail()}")
        with contextlib.suppress(Exception):
            if check():
                return
        time.sleep(0.3)
    raise UpgradeTestError(f"timed out waiting for {what}" + (f":\n{process.tail()}" if process else ""))


# ---- the database ------------------------------------------------------------------------------


def _database_url() -> str:
    explicit = os.environ.get("UPGRADE_TEST_DATABASE_URL")
    if explicit:
        return explicit
    base = os.environ.get("DATABASE_URL") or "postgres://postgres@127.0.0.1:5432/openwop"
    parts = urlsplit(base)
    return urlunsplit(parts._replace(path=f"{parts.path.rstrip('/')}_upgrade"))


def _redis_url() -> str:
    explicit = os.environ.get("UPGRADE_TEST_REDIS_URL")
    if explicit:
        return explicit
    parts = urlsplit(os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0")
    return urlunsplit(parts._replace(path="/13"))


def recreate_database(url: str) -> None:
    import psycopg

    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    admin = urlunsplit(parts._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", [name])
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')


def drop_database(url: str) -> None:
    import psycopg

    parts = urlsplit(url)
    with psycopg.connect(urlunsplit(parts._replace(path="/postgres")), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{parts.path.lstrip("/")}" WITH (FORCE)')


def clone_ended_runs(url: str, total: int, days: int) -> int:
    """The ended runs grown to `total` by copying the template runs (and their events) in SQL, each
    copy with its own ids, spread over `days` days; returns the ended runs there are now."""
    import psycopg

    with psycopg.connect(url, autocommit=False) as conn:
        columns = [row[0] for row in conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'runs_run' AND column_name <> 'id'"
            " ORDER BY ordinal_position").fetchall()]  # fmt: skip
        event_columns = [row[0] for row in conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'runs_runevent'"
            " AND column_name NOT IN ('id', 'run_id', 'event_id', 'at') ORDER BY ordinal_position",
        ).fetchall()]  # fmt: skip
        templates = conn.execute("SELECT count(*) FROM runs_run WHERE status IN ('completed', 'failed')").fetchone()[0]
        if not templates:
            raise UpgradeTestError("no ended run to copy")
        copies = max(0, math.ceil((total - templates) / templates))
        shifted = {
            "run_id": "split_part(t.run_id, '/', 1) || '/seed' || md5(t.id::text || '-' || g)",
            "created_at": "t.created_at - shift", "started_at": "t.started_at - shift",
            "completed_at": "t.completed_at - shift", "updated_at": "t.updated_at - shift",
        }  # fmt: skip
        select = ", ".join(shifted.get(c, f"t.{c}") for c in columns)
        conn.execute(f"""
            CREATE TEMP TABLE seed_map AS
            SELECT t.id AS template, g,
                   split_part(t.run_id, '/', 1) || '/seed' || md5(t.id::text || '-' || g) AS run_id,
                   make_interval(secs => (g * 7919 % ({days} * 86400))) AS shift
              FROM runs_run AS t CROSS JOIN generate_series(1, {copies}) AS g
             WHERE t.status IN ('completed', 'failed')""")  # noqa: S608
        conn.execute(f"""
            INSERT INTO runs_run ({", ".join(columns)})
            SELECT {select} FROM seed_map AS m JOIN runs_run AS t ON t.id = m.template""")  # noqa: S608
        conn.execute(f"""
            INSERT INTO runs_runevent (run_id, event_id, at, {", ".join(event_columns)})
            SELECT r.id, 'seed' || md5(e.id::text || '-' || m.g), e.at - m.shift, {", ".join("e." + c for c in event_columns)}
              FROM seed_map AS m JOIN runs_run AS r ON r.run_id = m.run_id JOIN runs_runevent AS e ON e.run_id = m.template""")  # noqa: S608,E501
        conn.commit()
        conn.execute("ANALYZE runs_run")
        conn.execute("ANALYZE runs_runevent")
        conn.commit()
        return int(conn.execute("SELECT count(*) FROM runs_run WHERE status IN ('completed', 'failed')").fetchone()[0])


def sample_runs(url: str, tenant: str, limit: int = 500) -> list[str]:
    import psycopg

    with psycopg.connect(url) as conn:
        return [row[0] for row in conn.execute(
            "SELECT run_id FROM runs_run WHERE run_id LIKE %s AND status IN ('completed', 'failed')"
            " ORDER BY md5(run_id) LIMIT %s", [f"{tenant}/%", limit]).fetchall()]  # fmt: skip


# ---- the test ----------------------------------------------------------------------------------


def _int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


def _env(database_url: str, redis_url: str, var_dir: Path, secret: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "OPENWOP_", "PYTEST", "VIRTUAL_ENV"))}
    env.update({
        "DATABASE_URL": database_url, "REDIS_URL": redis_url, "DJANGO_DEBUG": "1", "DJANGO_SECRET_KEY": secret,
        "DJANGO_LOG_LEVEL": "WARNING", "OPENWOP_VAR_DIR": str(var_dir), "PYTHONUNBUFFERED": "1",
        "OPENWOP_GRPC_ENABLED": "1", "DATABASE_POOL_MAX_SIZE": "8",
        # The seeded push configs point at loopback (never reached: their tasks wait).
        "OPENWOP_EGRESS_ALLOW_CIDRS": "127.0.0.0/8",
        # Each client has its own key; the doors' per-key limits stay on. The tenants' budgets
        # (issue 49) are lifted: the load runs each client as fast as the host answers, which on a
        # fast machine is more than 600 runs a minute for one tenant, and a budget's refusal is
        # not downtime (tests/tenants/test_tenant_budgets*.py prove the refusals).
        "OPENWOP_TENANT_RUNS_PER_MINUTE": "0", "OPENWOP_TENANT_RUNS_QUEUED": "0",
        "OPENWOP_TENANT_REQUESTS_PER_MINUTE": "0",
    })  # fmt: skip
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    return env


def _rest(base: str, key: str) -> httpx.Client:
    return httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=REQUEST_TIMEOUT)


def seed_through_the_doors(base: str, keys: dict[str, list[str]]) -> dict[str, Any]:
    """Template runs on every door (REST, A2A, MCP), approvals waiting, and push configs with sealed
    credentials on them (a waiting task's: its final push, which would wipe them, has not come)."""
    sealed: dict[str, str] = {}
    approvals: list[str] = []
    for tenant, tenant_keys in keys.items():
        with _rest(base, tenant_keys[0]) as rest:
            created = []
            for n in range(8):
                workflow = "conformance-failure" if n == 7 else "echo"
                created.append(_created(rest.post("/runs", json={"workflowId": workflow, "inputs": {"n": n}})))
            for n in range(4):
                message = {"messageId": f"seed-{tenant}-{n}", "role": "ROLE_USER", "parts": [{"text": "seed"}]}
                body = {"jsonrpc": "2.0", "id": n, "method": "SendMessage", "params": {"message": message}}
                ok, detail = _jsonrpc_ok(rest.post("/a2a/jsonrpc", json=body, headers={"A2A-Version": "1.0"}))
                body = {
                    "jsonrpc": "2.0",
                    "id": n,
                    "method": "tools/call",
                    "params": {"name": "echo", "arguments": {"greeting": "seed"}, "_meta": MCP_META},
                }
                called, said = _jsonrpc_ok(
                    rest.post(
                        "/mcp",
                        json=body,
                        headers={"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "echo"},
                    )
                )
                if not (ok and called):
                    raise UpgradeTestError(f"seeding: SendMessage {detail} / tools/call {said}")
            for n in range(3):
                run_id = _created(rest.post("/runs", json={"workflowId": "conformance-approval", "inputs": {}}))
                approvals.append(run_id)
                credential = f"{SEALED}-{tenant}-{n}"
                config = rest.post("/a2a/jsonrpc", headers={"A2A-Version": "1.0"}, json={
                    "jsonrpc": "2.0", "id": n, "method": "CreateTaskPushNotificationConfig",
                    "params": {"taskId": run_id, "url": f"https://127.0.0.1:9/hooks/{tenant}/{n}",
                               "authentication": {"scheme": "Bearer", "credentials": credential}}}).json()  # fmt: skip
                if "result" not in config:
                    raise UpgradeTestError(f"seeding: CreateTaskPushNotificationConfig: {config}")
                sealed[config["result"]["id"]] = credential
            for run_id in created:
                _until(lambda r=run_id: rest.get(f"/runs/{r.replace('/', '~2F')}").json()["status"]  # type: ignore[misc]
                       in ("completed", "failed"), f"seed run {run_id} to end")  # fmt: skip
    with _rest(base, keys[TENANTS[0]][0]) as rest:
        path = f"/runs/{approvals[0].replace('/', '~2F')}"
        _until(lambda: rest.get(path).json()["status"] == "waiting-approval", "the approval to wait")
    return {"sealed": sealed, "approval": approvals[0]}


def _created(response: httpx.Response) -> str:
    if response.status_code != 201:
        raise UpgradeTestError(f"seeding: POST /runs answered {response.status_code}: {response.text[:300]}")
    return str(response.json()["runId"])


def approval_resumes(base: str, key: str, run_id: str) -> str:
    with _rest(base, key) as rest:
        path = f"/runs/{run_id.replace('/', '~2F')}"
        response = rest.post(f"{path}/interrupts/approve", json={"resumeValue": {"action": "accept"}})
        if response.status_code != 200:
            raise UpgradeTestError(f"the approval did not resume: {response.status_code} {response.text}")
        _until(lambda: rest.get(path).json()["status"] == "completed", "the resumed approval to complete")
    return "resumed and completed on the new release"


SEALED_CHECK = """
import json, sys
from apps.push.crypto import credential_open
from apps.push.models import PushConfig
expected = json.loads(sys.stdin.read())
rows = PushConfig.unscoped_all_tenants.filter(config_id__in=list(expected))
opened = {row.config_id: credential_open(row.credentials_sealed) for row in rows if row.credentials_sealed}
print(json.dumps({"opened": sum(opened.get(k) == v for k, v in expected.items()), "expected": len(expected)}))
"""


def sealed_credentials_open(side: Side, env: dict[str, str], sealed: dict[str, str]) -> str:
    done = subprocess.run([side.python(), "manage.py", "shell", "-c", SEALED_CHECK], cwd=side.tree, env=env,
                          input=json.dumps(sealed), capture_output=True, text=True, timeout=120)  # fmt: skip
    if done.returncode != 0:
        raise UpgradeTestError(f"the sealed-credential check failed:\n{done.stderr}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if result["opened"] != result["expected"]:
        raise UpgradeTestError(f"sealed credentials: {result['opened']} of {result['expected']} open on the new one")
    return f"{result['opened']} of {result['expected']} open on the new release"


def main() -> int:
    started = time.monotonic()
    records, days, runs_total = (
        _int("UPGRADE_TEST_RECORDS", 200_000),
        _int("UPGRADE_TEST_DAYS", 35),
        _int("UPGRADE_TEST_RUNS", 20_000),
    )
    users_count, steady = _int("UPGRADE_TEST_USERS", 6), _int("UPGRADE_TEST_STEADY_SECONDS", 15)
    release = release_from()
    print(f"upgrade-test: from {release.version} ({release.commit[:12]}) to this checkout", flush=True)
    tree = old_tree(release)
    old = Side("old", tree, old_venv(release, tree) / "bin")
    new = Side("new", ROOT, Path(sys.executable).parent)
    print(f"upgrade-test: {release.version} installed ({time.monotonic() - started:.0f} s)", flush=True)

    run_dir = WORK / f"run-{time.strftime('%Y%m%d-%H%M%S')}"
    (run_dir / "logs").mkdir(parents=True)
    database_url, redis_url = _database_url(), _redis_url()
    recreate_database(database_url)
    import redis

    redis.Redis.from_url(redis_url).flushdb()
    env = _env(database_url, redis_url, run_dir, "upgrade-test-" + uuid.uuid4().hex * 2)
    processes = Processes(run_dir / "logs")
    recorder = Recorder()
    checks: dict[str, str] = {}
    failures: list[str] = []
    load: Load | None = None
    try:
        old.manage(env, "migrate", "--noinput", "-v", "0")
        keys: dict[str, list[str]] = json.loads(subprocess.run(
            [old.python(), str(ROOT / "scripts" / "upgrade_seed.py"), "tenants", ",".join(TENANTS),
             str(max(1, users_count // len(TENANTS)) + 1)],
            cwd=old.tree, env=env, capture_output=True, text=True, check=True,
        ).stdout.strip().splitlines()[-1])  # fmt: skip
        old_web, web_url = processes.web(old, env)
        old_grpc, grpc_address = processes.grpc(old, env)
        old_worker = processes.worker(old, env)
        seeded = seed_through_the_doors(web_url, keys)
        t = time.monotonic()
        seed_env = {**env, "UPGRADE_SEED_KEYS": json.dumps([k for tenant in keys.values() for k in tenant])}
        subprocess.run([old.python(), str(ROOT / "scripts" / "upgrade_seed.py"), "records", str(records), str(days)],
                       cwd=old.tree, env=seed_env, check=True, capture_output=True)  # fmt: skip
        ended = clone_ended_runs(database_url, runs_total, min(days, 28))
        print(f"upgrade-test: seeded {records} records over {days} days and {ended} ended runs with their events "
              f"({time.monotonic() - t:.0f} s)", flush=True)  # fmt: skip
        t = time.monotonic()
        verified = old.manage(env, "audit_verify").strip().splitlines()[-1]
        checks["chain before the upgrade (old audit_verify)"] = f"{verified} ({time.monotonic() - t:.0f} s)"

        users = [User(tenant, key, sample_runs(database_url, tenant))
                 for tenant in TENANTS for key in keys[tenant][1:]][:users_count]  # fmt: skip
        targets = Targets(web=[web_url], grpc=[grpc_address])
        load = Load(users, targets, recorder)
        recorder.begin("old release")
        load.start()
        time.sleep(steady)

        recorder.begin("migrate")
        t = time.monotonic()
        migrated = new.manage(env, "migrate", "--noinput")
        applied = [line.strip() for line in migrated.splitlines() if line.strip().startswith("Applying")]
        checks["migrate while the old release serves"] = f"{len(applied)} migrations in {time.monotonic() - t:.1f} s"

        recorder.begin("web replaced")
        _, new_web_url = processes.web(new, env)
        targets.web = [web_url, new_web_url]
        time.sleep(2)
        targets.web = [new_web_url]
        targets.drained(web_url)
        old_web.stop()

        recorder.begin("gRPC replaced")
        _, new_grpc_address = processes.grpc(new, env)
        targets.grpc = [grpc_address, new_grpc_address]
        time.sleep(2)
        targets.grpc = [new_grpc_address]
        targets.drained(grpc_address)
        old_grpc.stop()

        recorder.begin("worker replaced")
        processes.worker(new, env)
        old_worker.stop()
        time.sleep(2)

        recorder.begin("backfills")
        t = time.monotonic()
        backfilled = new.manage(env, "backfill", timeout=1800).strip().splitlines()
        checks["post-deploy backfills"] = f"{'; '.join(backfilled)} ({time.monotonic() - t:.1f} s)"

        recorder.begin("new release")
        time.sleep(steady)
        load.stop()
        load = None

        checks["the waiting approval"] = approval_resumes(new_web_url, keys[TENANTS[0]][0], seeded["approval"])
        checks["sealed push credentials"] = sealed_credentials_open(new, env, seeded["sealed"])
        t = time.monotonic()
        verify = subprocess.run([new.python(), "manage.py", "audit_verify"], cwd=new.tree, env=env,
                                capture_output=True, text=True, timeout=900)  # fmt: skip
        said = (verify.stdout + verify.stderr).strip().splitlines()
        last = said[-1] if said else ""
        checks["chain after the upgrade (new audit_verify)"] = f"{last} ({time.monotonic() - t:.0f} s)"
        if verify.returncode != 0:
            failures.append(f"audit_verify after the upgrade: {' / '.join(said[-3:])}")
    except (UpgradeTestError, subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        detail = getattr(exc, "stderr", None)
        failures.append(f"{exc}" + (f"\n{detail}" if detail else ""))
    finally:
        if load is not None:
            load.stop()
        processes.stop_all()

    print("\nupgrade-test: the load, phase by phase (a request belongs to the phase it started in)")
    print(recorder.table())
    print("\nupgrade-test: checks")
    for name, outcome in checks.items():
        print(f"  {name}: {outcome}")
    failures = recorder.verdict() + failures
    for sample in recorder.errors[:10]:
        print(f"  error: {sample.phase}: {sample.op}: {sample.detail}")
    print(f"\nupgrade-test: {time.monotonic() - started:.0f} s in all; logs in {run_dir.relative_to(ROOT)}")
    if failures:
        print("upgrade-test: FAILED\n  " + "\n  ".join(failures))
        for process in processes.running:
            if process.popen.returncode not in (0, -signal.SIGTERM, None):
                print(f"--- {process.name} (exit {process.popen.returncode})\n{process.tail()}")
        return 1
    drop_database(database_url)
    print("upgrade-test: passed (0 errors, no request slower than 2 s, every check held)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
