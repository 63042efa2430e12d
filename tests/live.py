"""Real processes for black-box tests: uvicorn serving the host (as `make run` does), Celery workers executing runs.

Both run against the test database pytest-django created (so tests using them need
`transactional_db`), each parallel test worker with its own Celery queue and broker folder.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
from django.db import connection

ROOT = Path(__file__).resolve().parent.parent


def _database_url() -> str:
    """This test's database as a DATABASE_URL for a live process (a unix socket's folder, as the
    embedded server listens on, percent-encoded as the host)."""
    db = connection.settings_dict
    user = db.get("USER") or ""
    password = f":{quote(db['PASSWORD'], safe='')}" if db.get("PASSWORD") else ""
    auth = f"{user}{password}@" if user else ""
    host = quote(db.get("HOST") or "127.0.0.1", safe="")
    port = f":{db['PORT']}" if db.get("PORT") else ""
    return f"postgres://{auth}{host}{port}/{db['NAME']}"


def wait_until(predicate: Callable[[], Any], what: str, timeout: float = 90) -> Any:
    """Poll `predicate` until it returns something truthy (returned), or fail naming `what`."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)
    return value


def pooled_env(env: dict[str, str], *, size: int, timeout: float, queue_suffix: str | None = None) -> dict[str, str]:
    """The live env with a small per-process pool that gives up quickly, and its own queue if asked."""
    pooled = {**env, "DATABASE_POOL_MAX_SIZE": str(size), "DATABASE_POOL_TIMEOUT": f"{timeout:g}"}
    if queue_suffix is not None:
        pooled["OPENWOP_CELERY_QUEUE"] = f"{env['OPENWOP_CELERY_QUEUE']}-{queue_suffix}"
    return pooled


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def process_env(worker_id: str, var_dir: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "DATABASE_URL": _database_url(),
            "DJANGO_DEBUG": "0",
            "DJANGO_SECRET_KEY": "live-test-secret-key-" + "x" * 40,
            "DJANGO_SECURE_SSL_REDIRECT": "0",
            "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
            "OPENWOP_VAR_DIR": str(var_dir),
            "OPENWOP_CELERY_QUEUE": f"openwop-test-{worker_id}-{os.getpid()}",
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update(extra)
    return env


@dataclass
class LiveProcess:
    proc: subprocess.Popen[bytes]
    log_path: Path

    def stop(self, *, kill: bool = False) -> None:
        if self.proc.poll() is not None:
            return
        if kill:
            self.proc.kill()
        else:
            self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def _spawn(args: list[str], env: dict[str, str], log_path: Path, pass_fds: tuple[int, ...] = ()) -> LiveProcess:
    log = log_path.open("wb")
    proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, pass_fds=pass_fds)
    return LiveProcess(proc=proc, log_path=log_path)


# The server `make run`, docker/ and the bench use (bench/README.md §ASGI server), as they start it.
WEB_SERVER_ARGS = ["--loop", "uvloop", "--http", "httptools", "--lifespan", "off", "--no-proxy-headers"]


def start_web(env: dict[str, str], log_dir: Path, *, own_public_url: bool = False) -> tuple[LiveProcess, str]:
    """uvicorn serving `openwop_host.asgi:application` on a free loopback port, once it answers.

    `own_public_url`: the process's OPENWOP_PUBLIC_URL is its own loopback URL (the URLs it
    publishes, e.g. OAuth audiences and resource metadata, must be the ones clients reach)."""
    # The listening socket is bound here and handed to uvicorn (`--fd`): a port picked free and
    # bound later by the child could be taken in between (the other xdist worker's servers, any
    # outgoing connection's ephemeral port), which failed a test's setup now and then.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(512)
    port = int(listener.getsockname()[1])
    if own_public_url:
        env = {**env, "OPENWOP_PUBLIC_URL": f"http://127.0.0.1:{port}"}
    try:
        live = _spawn(
            [sys.executable, "-m", "uvicorn", "openwop_host.asgi:application", "--fd", str(listener.fileno()),
             *WEB_SERVER_ARGS],
            env,
            log_dir / f"web-{port}.log",
            pass_fds=(listener.fileno(),),
        )  # fmt: skip
    finally:
        listener.close()  # the child holds its own copy
    base_url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if live.proc.poll() is not None:
            raise RuntimeError(f"the web server exited early:\n{live.log()}")
        try:
            if httpx.get(f"{base_url}/healthz", timeout=1).status_code == 200:
                return live, base_url
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    live.stop(kill=True)
    raise RuntimeError(f"the web server did not answer within 60 s:\n{live.log()}")


def start_celery_worker(env: dict[str, str], log_dir: Path, *, name: str = "w1", loglevel: str = "info") -> LiveProcess:
    live = _spawn(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "openwop_host",
            "worker",
            "--pool",
            "threads",
            "--concurrency",
            "4",
            "--loglevel",
            loglevel,
            # No -Q: the worker consumes every queue settings declare (runs and push, both named
            # after OPENWOP_CELERY_QUEUE), as `make run` and docker/ do.
            "-n",
            f"{name}@%h-{env['OPENWOP_CELERY_QUEUE']}",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ],
        env,
        log_dir / f"celery-{name}.log",
    )
    return live


def start_grpc(env: dict[str, str], log_dir: Path) -> tuple[LiveProcess, str]:
    """`manage.py grpc_serve` (as `make run` starts it) on a free loopback port, once it listens.

    `--port 0`: the server binds a free port itself and logs it, so no port is picked here and
    raced for (start_web's reason for `--fd`; grpc has no equivalent)."""
    log_path = log_dir / f"grpc-{time.monotonic_ns()}.log"
    live = _spawn([sys.executable, "manage.py", "grpc_serve", "--bind", "127.0.0.1", "--port", "0"], env, log_path)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if live.proc.poll() is not None:
            raise RuntimeError(f"the gRPC server exited early:\n{live.log()}")
        for line in live.log().splitlines():
            if line.startswith("A2A gRPC serving on "):  # grpc:// or, with TLS, grpcs://
                return live, line.rsplit("://", 1)[1].strip()
        time.sleep(0.1)
    live.stop(kill=True)
    raise RuntimeError(f"the gRPC server did not listen within 60 s:\n{live.log()}")
