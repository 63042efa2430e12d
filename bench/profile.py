"""Profile our host under wrk load with py-spy: where does a request's time go?

Starts the host exactly as bench/run.py does (production settings, the recommended ASGI server,
the Celery worker), drives one scenario with wrk, and records every server process with
`py-spy record --subprocesses --idle --format raw` (collapsed stacks, wall-clock incl. waiting).
Prints the top frames by inclusive share of samples, restricted to project code and the
database/network calls they wait on.

    .venv/bin/python bench/profile.py --scenario gettask --connections 16 --seconds 15
    .venv/bin/python bench/profile.py --target default --cpu --connections 64   # the `make run` host
"""

from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
import threading
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import run as bench_run  # noqa: E402
from harness.wrk import run_wrk  # noqa: E402

INTERESTING = (
    "apps/", "openwop_host/", "django/", "psycopg", "redis", "asgiref/", "channels", "daphne", "twisted", "protobuf",
)  # fmt: skip


def top_frames(raw: Path, limit: int) -> list[tuple[str, float]]:
    """Inclusive share of samples per frame (a frame counted once per stack)."""
    counts: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack:
            continue
        samples = int(n)
        total += samples
        seen = set()
        for frame in stack.split(";"):
            if any(part in frame for part in INTERESTING) and frame not in seen:
                seen.add(frame)
                counts[frame] += samples
    return [(frame, round(100 * c / total, 1)) for frame, c in counts.most_common(limit)] if total else []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", choices=("gettask", "sendmessage", "mcp"), default="gettask")
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--seconds", type=int, default=15)
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--cpu", action="store_true", help="only threads holding the GIL (default: wall clock)")
    parser.add_argument(
        "--target", choices=("production", "default"), default="production",
        help="production: PostgreSQL + Redis, production settings; default: the host as `make run` starts it",
    )  # fmt: skip
    parser.add_argument("--out", default=str(bench_run.VAR / "profile.txt"))
    args = parser.parse_args()
    bench_run.VAR.mkdir(parents=True, exist_ok=True)
    if args.target == "default":
        servers, key = bench_run.start_default_host()
        host = servers[-1]
    else:
        bench_run._ensure_database(bench_run.DATABASE_URL)
        bench_run.manage("migrate", "--noinput", "-v", "0")
        key = bench_run.manage("create_api_key", "--tenant", "bench", "--label", "bench")
        servers = [bench_run.start_worker(), bench_run.start_host(bench_run.RECOMMENDED, bench_run.WORKERS)]
        host = servers[-1]
    try:
        base = f"http://127.0.0.1:{host.port}"
        task_id = bench_run.create_task(base, key)
        load = {
            "gettask": lambda: bench_run.gettask_load(base, task_id, key),
            "sendmessage": lambda: bench_run.sendmessage_load(base, key),
            "mcp": lambda: bench_run.mcp_load(base, "conformance-noop", key),
        }[args.scenario]()
        run_wrk(load, connections=args.connections, seconds=3, threads=2, cpus=bench_run.GEN_CPUS)  # warm-up
        raw = bench_run.VAR / "profile.raw"
        assert host.proc is not None
        spy = subprocess.Popen(
            [str(bench_run.VENV_BIN / "py-spy"), "record", "--pid", str(host.proc.pid), "--subprocesses",
             *(["--gil"] if args.cpu else ["--idle"]), "--format", "raw", "--rate", "200",
             "--duration", str(args.seconds), "--output", str(raw), "--nonblocking"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip
        result: dict = {}
        load_thread = threading.Thread(
            target=lambda: result.update(
                run_wrk(load, connections=args.connections, seconds=args.seconds, threads=2, cpus=bench_run.GEN_CPUS)
            )
        )
        load_thread.start()
        load_thread.join()
        spy.wait(timeout=60)
    finally:
        for server in reversed(servers):
            server.stop()
    lines = [f"{args.target} {args.scenario} c={args.connections} {'gil' if args.cpu else 'wall'}: " + json.dumps(
        {k: result.get(k) for k in ("rps", "p50_ms", "p99_ms", "bad", "generator_cpu_pct")})]  # fmt: skip
    lines += [f"{share:5.1f}%  {frame}" for frame, share in top_frames(raw, args.top)]
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
