"""The shared back ends both sides use (PostgreSQL, Redis): their settings for the results' meta,
and their processes' CPU, so CPU per request counts the work a server pushes into them too."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from harness.procs import process_cpu

POSTGRES_SETTINGS = ("server_version", "fsync", "synchronous_commit", "shared_buffers", "autovacuum")


def _comm(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def infra_pids() -> list[int]:
    """Every PostgreSQL process (postmaster and backends) and redis-server on this machine."""
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and _comm(p) in ("postgres", "redis-server")]


class InfraCpu:
    """CPU seconds the back ends spent between start() and stop(). Backends that start inside the
    window count from zero; one that exits inside it loses its share (rare: both sides pool)."""

    def __init__(self) -> None:
        self._before: dict[int, float] = {}

    def start(self) -> None:
        self._before = {pid: process_cpu(pid) for pid in infra_pids()}

    def seconds(self) -> float:
        now = {pid: process_cpu(pid) for pid in infra_pids()}
        return sum(max(0.0, cpu - self._before.get(pid, 0.0)) for pid, cpu in now.items())


def postgres_meta(url: str) -> dict[str, Any]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        return {name: conn.execute(f"SHOW {name}").fetchone()[0] for name in POSTGRES_SETTINGS}  # type: ignore[index]


def redis_meta(url: str) -> dict[str, Any]:
    import redis

    client = redis.Redis.from_url(url)
    info = client.info("server")
    persistence = client.info("persistence")
    config = client.config_get("save") | client.config_get("appendonly")
    return {
        "version": info.get("redis_version"),
        "persistence": {
            "rdb_save": config.get("save", ""),
            "appendonly": config.get("appendonly", ""),
            "aof_enabled": persistence.get("aof_enabled"),
        },
    }
