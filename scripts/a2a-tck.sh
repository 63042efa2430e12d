#!/usr/bin/env bash
# Run the A2A TCK against a fresh openwop-host on loopback and print its summary.
#
#   scripts/a2a-tck.sh /path/to/a2a-tck [run_tck.py options...]
#
# The TCK is a checkout of a2aproject/a2a-tck at branch 1.0-dev, kept OUTSIDE this repository,
# with its dependencies installed in a virtualenv (`python3 -m venv /path/to/a2a-tck/.venv &&
# /path/to/a2a-tck/.venv/bin/pip install -e /path/to/a2a-tck`; TCK_PYTHON names another one).
# This script starts a host like `make run` does (migrate, seed_demo, a demo key, a Celery worker,
# uvicorn, and the gRPC binding on a second free port) on a free port, with push delivery allowed
# to plain http on loopback (the TCK's webhook receiver), with a fresh embedded PostgreSQL under a
# temporary OPENWOP_VAR_DIR unless DATABASE_URL is set (then that database is migrated and used: give it an empty one). The TCK
# sends no credentials, so scripts/a2a_tck_auth.py (a pytest plugin) gives its HTTP clients and its
# gRPC channels the demo key as a bearer. Reports land in the TCK checkout's reports/ directory.
set -euo pipefail

if [[ $# -lt 1 || ! -f "$1/run_tck.py" ]]; then
  echo "usage: $0 /path/to/a2a-tck [run_tck.py options...]" >&2
  exit 2
fi
TCK_DIR=$(cd "$1" && pwd)
shift
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY="$ROOT/.venv/bin/python"
TCK_PYTHON=${TCK_PYTHON:-$TCK_DIR/.venv/bin/python}
[[ -x "$PY" ]] || { echo "run 'make install' first ($PY missing)" >&2; exit 2; }
[[ -x "$TCK_PYTHON" ]] || { echo "no TCK virtualenv at $TCK_PYTHON (set TCK_PYTHON)" >&2; exit 2; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/a2a-tck.XXXXXX")
PORT=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
BASE="http://127.0.0.1:$PORT"
GRPC_PORT=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export DJANGO_DEBUG=1 OPENWOP_VAR_DIR="$WORK" OPENWOP_PUBLIC_URL="$BASE"
# The gRPC binding runs beside the web server, and the card lists it (the TCK's third transport).
export OPENWOP_GRPC_ENABLED=1 OPENWOP_GRPC_URL="127.0.0.1:$GRPC_PORT"
export OPENWOP_CELERY_QUEUE="a2a-tck-$PORT"  # never share a queue with another host on a shared broker
# The TCK's webhook receiver is plain http on loopback (`--webhook-host 127.0.0.1` below): let push
# delivery reach loopback, over http, for this host only, so its push scenarios run against real
# delivery. Every other egress rule stays on (webhooks.md §Egress).
export OPENWOP_EGRESS_ALLOW_CIDRS="127.0.0.0/8" OPENWOP_EGRESS_ALLOW_HTTP_CIDRS="127.0.0.0/8"
# The TCK's push-config CRUD scenarios register https://example.com/...: this host's hosts file
# names it on loopback, so they pass offline and their pushes never leave the machine.
printf '127.0.0.1 example.com\n' > "$WORK/hosts"
export OPENWOP_EGRESS_HOSTS_FILE="$WORK/hosts"
cd "$ROOT"

pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [[ -z "${KEEP_WORK:-}" ]]; then rm -rf "$WORK"; else echo "host files kept in $WORK"; fi
}
trap cleanup EXIT INT TERM

"$PY" manage.py migrate --noinput -v 0
"$PY" manage.py seed_demo > /dev/null
KEY=$("$PY" manage.py create_api_key --tenant demo --label "a2a-tck run" 2>/dev/null)

# No -Q: the worker consumes every queue settings declare (runs, and push on "<queue>-push").
"$ROOT/.venv/bin/celery" -A openwop_host worker --pool threads --concurrency 16 \
  --loglevel info > "$WORK/worker.log" 2>&1 &
pids+=($!)
"$PY" manage.py grpc_serve --bind 127.0.0.1 --port "$GRPC_PORT" > "$WORK/grpc.log" 2>&1 &
pids+=($!)
"$ROOT/.venv/bin/uvicorn" openwop_host.asgi:application --host 127.0.0.1 --port "$PORT" --loop uvloop --http httptools --lifespan off --no-proxy-headers > "$WORK/web.log" 2>&1 &
pids+=($!)

for _ in $(seq 1 100); do
  curl -fsS "$BASE/.well-known/agent-card.json" > /dev/null 2>&1 && break
  sleep 0.2
done
curl -fsS "$BASE/.well-known/agent-card.json" > /dev/null || { echo "the host did not start:" >&2; tail -20 "$WORK/web.log" >&2; exit 1; }
echo "host on $BASE (logs in $WORK); running the TCK from $TCK_DIR"

set +e
(cd "$TCK_DIR" && A2A_TCK_BEARER="$KEY" PYTHONPATH="$ROOT/scripts${PYTHONPATH:+:$PYTHONPATH}" \
  "$TCK_PYTHON" run_tck.py --sut-host "$BASE" "$@" -- -p a2a_tck_auth --webhook-host 127.0.0.1 -rfE) | tee "$WORK/tck.log"
status=${PIPESTATUS[0]}
set -e

echo
echo "== A2A TCK summary ($(cd "$TCK_DIR" && git rev-parse --short HEAD 2>/dev/null || echo unknown)) =="
"$PY" - "$TCK_DIR/reports/junitreport.xml" <<'PYEOF'
"""Pass / fail / skip / xfail per test module, from the TCK's JUnit report."""
import collections
import sys
import xml.etree.ElementTree as ET

counts = collections.defaultdict(collections.Counter)
for case in ET.parse(sys.argv[1]).getroot().iter("testcase"):
    area = case.get("classname", "?").removeprefix("tests.compatibility.")
    if area.rsplit(".", 1)[-1].startswith("Test"):  # module.Class -> module
        area = area.rsplit(".", 1)[0]
    skipped = case.find("skipped")
    if case.find("failure") is not None or case.find("error") is not None:
        outcome = "failed"
    elif skipped is not None:
        outcome = "xfailed" if skipped.get("type") == "pytest.xfail" else "skipped"
    else:
        outcome = "passed"
    counts[area][outcome] += 1
total = collections.Counter()
print(f"{'category':48} {'passed':>7} {'failed':>7} {'xfailed':>7} {'skipped':>7}")
for area in sorted(counts):
    c = counts[area]
    total.update(c)
    print(f"{area:48} {c['passed']:7} {c['failed']:7} {c['xfailed']:7} {c['skipped']:7}")
print(f"{'TOTAL':48} {total['passed']:7} {total['failed']:7} {total['xfailed']:7} {total['skipped']:7}")
PYEOF
"$PY" - "$TCK_DIR/reports/compatibility.json" <<'PYEOF'
"""The TCK's own per-level compatibility figures."""
import json
import sys

summary = json.load(open(sys.argv[1]))["summary"]
print("compatibility: " + ", ".join(f"{k.removesuffix('_compatibility')} {v}" for k, v in summary.items() if k.endswith("compatibility")))
PYEOF
exit "$status"
