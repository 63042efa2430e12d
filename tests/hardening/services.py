"""Private PostgreSQL and Redis servers for fault injection, on free loopback ports.

A test that stops a service stops only its own instance: the machine's shared PostgreSQL and
Redis serve other suites and are never touched (BRIEF, non-negotiables).
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.live import free_port, wait_until


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class PrivateRedis:
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                "redis-server",
                "--bind",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--save",
                "",
                "--appendonly",
                "no",
                "--daemonize",
                "no",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_until(lambda: _port_open(self.port), f"redis on {self.port}", timeout=20)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)
        wait_until(lambda: not _port_open(self.port), "redis to go away", timeout=10)


@contextlib.contextmanager
def private_redis() -> Iterator[PrivateRedis]:
    if shutil.which("redis-server") is None:
        raise RuntimeError("redis-server is not installed")
    redis = PrivateRedis()
    redis.start()
    try:
        yield redis
    finally:
        redis.kill()


def _pg_bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if not found:
        raise RuntimeError(f"no {name} under /usr/lib/postgresql/*/bin")
    return found[-1]


@dataclass
class PrivatePostgres:
    """A throwaway cluster in a temp dir. initdb refuses to run as root, so as root the cluster
    belongs to the `postgres` system user and its commands run through `runuser`."""

    root: Path
    port: int = field(default_factory=free_port)

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str) -> None:
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run([*prefix, *args], check=True, capture_output=True, timeout=120)

    def init(self) -> None:
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")
        self._run(_pg_bin("initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")

    def start(self) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run(
            _pg_bin("pg_ctl"),
            "-D",
            str(self.data),
            "-o",
            options,
            "-l",
            str(self.root / "pg.log"),
            "-w",
            "-t",
            "60",
            "start",
        )

    def stop(self, mode: str = "fast") -> None:
        self._run(_pg_bin("pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")


@contextlib.contextmanager
def private_postgres() -> Iterator[PrivatePostgres]:
    root = Path(tempfile.mkdtemp(prefix="h12-pg-"))
    cluster = PrivatePostgres(root=root)
    cluster.init()
    cluster.start()
    try:
        yield cluster
    finally:
        with contextlib.suppress(Exception):
            cluster.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)
