"""One wrk run: build the command, run it on the generator's cores, parse what post.lua printed.

The generator's own CPU use comes from the kernel (wait4 rusage of the wrk process), so every
figure carries the proof that the generator was not the bottleneck.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LUA = Path(__file__).resolve().parent.parent / "wrk" / "post.lua"
MARKER = "BENCH_JSON "


@dataclass(frozen=True)
class Load:
    """What to send: the URL, the body (with {{N}} placeholders), headers, and the success marker."""

    url: str
    body: str
    headers: dict[str, str]
    ok_marker: str = ""
    rotate: tuple[str, ...] = ()  # values for "{{KEY}}" in headers, one per request in turn
    method: str = "POST"  # GET sends no body (the agent card)


class WrkOutputError(ValueError):
    """wrk printed no BENCH_JSON line (crashed, or the Lua script failed)."""


def parse_wrk_output(stdout: str) -> dict[str, Any]:
    """The BENCH_JSON line post.lua's done() prints, with derived throughput and ms latencies."""
    for line in stdout.splitlines():
        if line.startswith(MARKER):
            raw = json.loads(line[len(MARKER) :])
            break
    else:
        raise WrkOutputError(f"no {MARKER.strip()} line in wrk output: {stdout[-500:]!r}")
    seconds = raw["duration_us"] / 1e6
    latency = raw["latency_us"]
    # wrk's "status" errors are non-2xx responses, which post.lua already counts as bad.
    errors = sum(n for kind, n in raw["errors"].items() if kind != "status")
    return {
        "requests": raw["requests"],
        "good": raw["good"],
        "bad": raw["bad"],
        "socket_errors": errors,
        "errors": raw["errors"],
        "seconds": round(seconds, 3),
        # Only good responses count as throughput: an error answered fast is not work done.
        "rps": round(raw["good"] / seconds, 1) if seconds else 0.0,
        "p50_ms": round(latency["p50"] / 1000, 2),
        "p90_ms": round(latency["p90"] / 1000, 2),
        "p99_ms": round(latency["p99"] / 1000, 2),
        "p999_ms": round(latency["p999"] / 1000, 2),
        "mean_ms": round(latency["mean"] / 1000, 2),
        "max_ms": round(latency["max"] / 1000, 2),
        "first_bad": raw.get("first_bad", ""),
    }


def wrk_command(load: Load, *, connections: int, seconds: float, threads: int, cpus: str) -> list[str]:
    threads = max(1, min(threads, connections))
    return [
        "taskset", "-c", cpus,
        "wrk", f"-t{threads}", f"-c{connections}", f"-d{max(1, round(seconds))}s", "--timeout", "10s",
        "-s", str(LUA), load.url,
    ]  # fmt: skip


def run_wrk(load: Load, *, connections: int, seconds: float, threads: int, cpus: str) -> dict[str, Any]:
    """Run wrk to completion; the result carries the generator's CPU (% of one core) beside it."""
    env = dict(os.environ)
    env["BENCH_BODY"] = load.body
    env["BENCH_HEADERS"] = "\n".join(f"{k}: {v}" for k, v in load.headers.items())
    env["BENCH_OK"] = load.ok_marker
    env["BENCH_METHOD"] = load.method
    env["BENCH_ROTATE"] = "\n".join(load.rotate)
    cmd = wrk_command(load, connections=connections, seconds=seconds, threads=threads, cpus=cpus)
    before = _children_cpu()
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    stdout, stderr = proc.communicate()
    wall = time.monotonic() - started
    # taskset execs wrk in place, so the reaped child is wrk itself; no other child of this process
    # is reaped meanwhile (servers are reaped only at shutdown), so the delta is wrk's alone.
    generator_cpu = _children_cpu() - before
    if proc.returncode != 0:
        raise WrkOutputError(f"wrk exited {proc.returncode}: {stderr[-500:]}")
    result = parse_wrk_output(stdout)
    result["wall_s"] = round(wall, 3)
    result["generator_cpu_pct"] = round(100 * generator_cpu / wall, 1) if wall else 0.0
    return result


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime
