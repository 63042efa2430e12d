"""One wrk run: build the command, run it on the generator's cores, parse what post.lua printed.

The generator's own CPU use comes from the kernel (wait4 rusage of the wrk process), so every
figure carries the proof that the generator was not the bottleneck.
"""

from __future__ import annotations

import json
import os
import resource
import signal
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


def wrk_env(load: Load) -> dict[str, str]:
    """The environment post.lua reads the load from."""
    return {**os.environ, "BENCH_BODY": load.body, "BENCH_OK": load.ok_marker, "BENCH_METHOD": load.method,
            "BENCH_HEADERS": "\n".join(f"{k}: {v}" for k, v in load.headers.items()),
            "BENCH_ROTATE": "\n".join(load.rotate)}  # fmt: skip


def run_wrk(load: Load, *, connections: int, seconds: float, threads: int, cpus: str) -> dict[str, Any]:
    """Run wrk to completion; the result carries the generator's CPU (% of one core) beside it."""
    cmd = wrk_command(load, connections=connections, seconds=seconds, threads=threads, cpus=cpus)
    before = _children_cpu()
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=wrk_env(load), text=True)
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


class BackgroundWrk:
    """wrk for as long as something else takes: `start()`, then `stop()` (SIGINT: wrk still prints its
    report) returns the parsed result with the window (`wall_s`) and the generator's own CPU
    (`generator_cpu_s`, `generator_cpu_pct`: wait4 rusage of wrk, which taskset execs in place).
    As a context manager, the block is the window (entered `lead_s` after wrk started: a load
    under way before what it is measured beside) and `result` holds the report after it."""

    def __init__(self, load: Load, *, connections: int, threads: int, cpus: str, limit_s: float = 3600.0,
                 lead_s: float = 0.0) -> None:  # fmt: skip
        self.load, self.connections, self.threads, self.cpus, self.limit_s = load, connections, threads, cpus, limit_s
        self.lead_s = lead_s
        self.proc: subprocess.Popen[str] | None = None
        self.result: dict[str, Any] = {}

    def start(self) -> BackgroundWrk:
        cmd = wrk_command(self.load, connections=self.connections, seconds=self.limit_s, threads=self.threads,
                          cpus=self.cpus)  # fmt: skip
        self._started = time.monotonic()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=wrk_env(self.load),
                                     text=True)  # fmt: skip
        return self

    def stop(self) -> dict[str, Any]:
        proc = self.proc
        assert proc is not None and proc.stdout is not None and proc.stderr is not None
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.stdout.read(), proc.stderr.read()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.monotonic() - self._started
        if proc.returncode not in (0, -signal.SIGINT):
            raise WrkOutputError(f"wrk exited {proc.returncode}: {stderr[-500:]}")
        cpu = usage.ru_utime + usage.ru_stime
        self.result = {**parse_wrk_output(stdout), "wall_s": round(wall, 3), "generator_cpu_s": round(cpu, 3),
                       "generator_cpu_pct": round(100 * cpu / wall, 1) if wall else 0.0}  # fmt: skip
        return self.result

    def __enter__(self) -> BackgroundWrk:
        self.start()
        time.sleep(self.lead_s)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
