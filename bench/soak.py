"""Soak: mixed traffic at fixed concurrency against a live host for a long time (issue 12 §Soak).

What runs: a real Daphne and a real Celery worker (threads pool) started here, on DATABASE_URL /
REDIS_URL when set (else SQLite and the filesystem broker under a temp dir), with `--keys` API
keys of one tenant. `--processes` driver processes each run `concurrency / processes` virtual
users; every user loops over a mixed request: discovery, REST list / create / get / poll, A2A
SendMessage + GetTask (JSON-RPC), MCP tools/list. Rate limits stay on (each user has its own key).

Reported: requests and errors (any 5xx, transport error or unexpected status: must be 0), the p50
/ p99 of every window and the p99 drift (last window / first window), and each server process's
RSS at the start and the end (growth in MiB).

    .venv/bin/python bench/soak.py --seconds 600 --concurrency 64      # make soak
    SOAK_SECONDS=120 make soak                                           # a short run
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.live import free_port  # noqa: E402 - after the path is set

WINDOW_SECONDS = 30.0
MCP_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}, "url": {}}},
}


def _env(var_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "DJANGO_DEBUG": "0",
            "DJANGO_SECRET_KEY": "soak-secret-key-" + "s" * 40,
            "DJANGO_SECURE_SSL_REDIRECT": "0",
            "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
            "OPENWOP_VAR_DIR": str(var_dir),
            "OPENWOP_CELERY_QUEUE": f"openwop-soak-{os.getpid()}",
            "DJANGO_LOG_LEVEL": "WARNING",
            "PYTHONUNBUFFERED": "1",
        }
    )
    if not env.get("DATABASE_URL"):
        env["DATABASE_URL"] = f"sqlite:///{var_dir / 'soak.sqlite3'}"
    return env


def _start(env: dict[str, str], var_dir: Path) -> tuple[list[subprocess.Popen[bytes]], str, list[str]]:
    python = sys.executable
    subprocess.run([python, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=ROOT, env=env, check=True)
    create = (
        "from apps.tenants.services import api_key_create, tenant_get_or_create\n"
        "from apps.agents.services import workflow_fixtures_seed\n"
        "t, _ = tenant_get_or_create(slug='soak')\n"
        "workflow_fixtures_seed(tenant=t)\n"
        f"print('\\n'.join(api_key_create(tenant=t, kind='user')[1] for _ in range({env['SOAK_KEYS']})))\n"
    )
    out = subprocess.run(
        [python, "manage.py", "shell", "-c", create], cwd=ROOT, env=env, check=True, capture_output=True, text=True
    ).stdout
    keys = [line.strip() for line in out.splitlines() if line.startswith("owk_")]
    port = free_port()
    logs = [(var_dir / "web.log").open("wb"), (var_dir / "worker.log").open("wb")]
    web = subprocess.Popen(
        [
            python,
            "-m",
            "uvicorn",
            "openwop_host.asgi:application",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--loop",
            "uvloop",
            "--http",
            "httptools",
            "--lifespan",
            "off",
            "--no-proxy-headers",
            "--no-access-log",
        ],
        cwd=ROOT,
        env=env,
        stdout=logs[0],
        stderr=subprocess.STDOUT,
    )
    worker = subprocess.Popen(
        [
            python,
            "-m",
            "celery",
            "-A",
            "openwop_host",
            "worker",
            "--pool",
            "threads",
            "--concurrency",
            "16",
            "--loglevel",
            "warning",
            "-Q",
            env["OPENWOP_CELERY_QUEUE"],
            "-n",
            f"soak@%h-{os.getpid()}",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ],
        cwd=ROOT,
        env=env,
        stdout=logs[1],
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                return [web, worker], base, keys
        except httpx.HTTPError:
            time.sleep(0.2)
    raise RuntimeError("the web server did not start")


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def _user(base: str, key: str, until: float, samples: list[tuple[float, float, str, int]]) -> None:
    """One virtual user: a mixed request after another until `until`; each (time, seconds, op, status)."""
    auth = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=base, headers=auth, timeout=30) as client:
        runs: list[str] = []
        serial = 0
        while time.monotonic() < until:
            serial += 1
            op = random.choices(
                ["discovery", "list", "create", "get", "poll", "a2a_send", "a2a_get", "mcp_list"],
                weights=[1, 2, 2, 3, 1, 1, 1, 1],
            )[0]
            started = time.monotonic()
            try:
                if op == "discovery":
                    status = (await client.get("/.well-known/openwop")).status_code
                elif op == "list":
                    status = (await client.get("/runs")).status_code
                elif op == "create" or (op in ("get", "poll") and not runs):
                    op = "create"
                    response = await client.post("/runs", json={"workflowId": "echo", "inputs": {"n": serial}})
                    status = response.status_code
                    if status == 201:
                        runs.append(response.json()["runId"].replace("/", "~2F"))
                        runs[:] = runs[-20:]
                elif op == "get":
                    status = (await client.get(f"/runs/{random.choice(runs)}")).status_code
                elif op == "poll":
                    poll = await client.get(f"/runs/{random.choice(runs)}/events/poll", params={"timeout": 1})
                    status = poll.status_code
                elif op == "a2a_send":
                    response = await client.post(
                        "/a2a/jsonrpc",
                        headers={"A2A-Version": "1.0"},
                        json={
                            "jsonrpc": "2.0",
                            "id": serial,
                            "method": "SendMessage",
                            "params": {
                                "message": {
                                    "messageId": f"{key[4:16]}-{serial}",
                                    "role": "ROLE_USER",
                                    "parts": [{"text": "soak"}],
                                },
                                "configuration": {"returnImmediately": True},
                            },
                        },
                    )
                    status = response.status_code if "result" in response.json() else 599
                elif op == "a2a_get":
                    response = await client.post(
                        "/a2a/jsonrpc",
                        headers={"A2A-Version": "1.0"},
                        json={"jsonrpc": "2.0", "id": serial, "method": "ListTasks", "params": {"pageSize": 5}},
                    )
                    status = response.status_code if "result" in response.json() else 599
                else:
                    response = await client.post(
                        "/mcp",
                        headers={"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/list"},
                        json={"jsonrpc": "2.0", "id": serial, "method": "tools/list", "params": {"_meta": MCP_META}},
                    )
                    status = response.status_code if "result" in response.json() else 599
            except (httpx.HTTPError, ValueError):
                status = 0
            samples.append((started, time.monotonic() - started, op, status))


def _driver(base: str, keys: list[str], until: float, out: Any) -> None:
    samples: list[tuple[float, float, str, int]] = []

    async def main() -> None:
        await asyncio.gather(*(_user(base, key, until, samples) for key in keys))

    asyncio.run(main())
    out.put(samples)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000 if ordered else 0.0


OK = {"create": {201}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=float(os.environ.get("SOAK_SECONDS", 600)))
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--processes", type=int, default=4)
    args = parser.parse_args()
    var_dir = Path(tempfile.mkdtemp(prefix="openwop-soak-"))
    env = _env(var_dir)
    env["SOAK_KEYS"] = str(args.concurrency)
    procs, base, keys = _start(env, var_dir)
    try:
        time.sleep(2)
        rss_start = {name: _rss_mib(p.pid) for name, p in zip(("web", "worker"), procs, strict=True)}
        started = time.monotonic()
        until = started + args.seconds
        queue: Any = multiprocessing.Queue()
        share = [keys[i :: args.processes] for i in range(args.processes)]
        drivers = [multiprocessing.Process(target=_driver, args=(base, part, until, queue)) for part in share]
        for driver in drivers:
            driver.start()
        rss_series: list[dict[str, float]] = []  # {"t": seconds since start, process: MiB}
        while time.monotonic() < until:
            time.sleep(min(10.0, max(0.1, until - time.monotonic())))
            sample = {name: _rss_mib(p.pid) for name, p in zip(("web", "worker"), procs, strict=True)}
            rss_series.append({"t": time.monotonic() - started, **sample})
        samples = [s for _ in drivers for s in queue.get(timeout=120)]
        for driver in drivers:
            driver.join(timeout=30)
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=30)
    warm = next((r for r in rss_series if r["t"] >= WINDOW_SECONDS), rss_series[0])
    errors = [s for s in samples if s[3] not in OK.get(s[2], {200})]
    windows: dict[int, list[float]] = {}
    for t, seconds, _, _ in samples:
        windows.setdefault(int((t - started) // WINDOW_SECONDS), []).append(seconds)
    per_window = [
        {
            "window": w,
            "requests": len(v),
            "p50_ms": round(_percentile(v, 0.5), 1),
            "p99_ms": round(_percentile(v, 0.99), 1),
        }
        for w, v in sorted(windows.items())
    ]
    full = [w for w in per_window if w["requests"] > 50]
    report = {
        "seconds": args.seconds,
        "concurrency": args.concurrency,
        "database": env["DATABASE_URL"].split(":", 1)[0],
        "redis": bool(env.get("REDIS_URL")),
        "requests": len(samples),
        "rps": round(len(samples) / args.seconds, 1),
        "errors": len(errors),
        "error_kinds": {
            f"{op}:{status}": sum(1 for e in errors if (e[2], e[3]) == (op, status))
            for op, status in {(e[2], e[3]) for e in errors}
        },
        "p50_ms": round(_percentile([s[1] for s in samples], 0.5), 1),
        "p99_ms": round(_percentile([s[1] for s in samples], 0.99), 1),
        "p99_drift": round(full[-1]["p99_ms"] / full[0]["p99_ms"], 2) if len(full) > 1 and full[0]["p99_ms"] else None,
        "windows": per_window,
        # Growth is measured from the end of the first window (caches, pools and imports warmed up).
        "rss_mib": {
            name: {
                "idle": round(rss_start[name], 1),
                "warm": round(warm[name], 1),
                "end": round(rss_series[-1][name], 1),
                "growth_after_warmup": round(rss_series[-1][name] - warm[name], 1),
            }
            for name in rss_start
        },
        "logs": str(var_dir),
    }
    print(json.dumps(report, indent=2))
    if errors:
        sys.exit(1)


if __name__ == "__main__":
    main()
