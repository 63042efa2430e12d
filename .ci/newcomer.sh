#!/usr/bin/env bash
# Runs inside `unshare -n` (see .ci/run): only loopback exists. $1 is a fresh, installed clone.
set -euo pipefail
ip link set lo up
cd "$1"
port=8765
setsid make run PORT=$port GRPC_PORT=50765 > run.log 2>&1 &
host=$!
# Ctrl-C, as a person stops it: every process of the host ends, and the last stops the embedded PostgreSQL.
stop() {
  kill -INT -- "-$host" 2>/dev/null || true
  for _ in $(seq 1 60); do kill -0 -- "-$host" 2>/dev/null || return 0; sleep 1; done
  echo "make run did not stop within 60 s of Ctrl-C"; kill -KILL -- "-$host" 2>/dev/null || true; return 1
}
trap stop EXIT
base="http://127.0.0.1:$port"
for _ in $(seq 1 180); do curl -sf -o /dev/null "$base/readyz" && break; sleep 1; done
ready=$(curl -sf "$base/readyz") || { echo "make run did not become ready"; tail -50 run.log; exit 1; }
echo "$ready"
# It says what a newcomer gets: the embedded PostgreSQL and the in-process stand-ins for Redis.
printf '%s' "$ready" | .venv/bin/python -c 'import json, sys; b = json.load(sys.stdin)["backends"]; assert b == {
  "database": "embedded-postgresql", "broker": "filesystem", "channelLayer": "in-process", "counters": "in-process"}, b'
grep -q "embedded PostgreSQL under var/pg" run.log || { echo "the banner does not say which database"; exit 1; }
curl -sf "$base/.well-known/openwop" | grep -q '"a2a"' || { echo "discovery does not answer"; exit 1; }
key=$(cat var/demo-api-key)
# A run through the REST door, executed by the worker `make run` started, to completion.
run=$(curl -sf -H "Authorization: Bearer $key" -H 'Content-Type: application/json' \
  -d '{"workflowId": "conformance-delay", "inputs": {"delayMs": 200}}' "$base/runs")
run_id=$(printf '%s' "$run" | .venv/bin/python -c 'import json,sys; print(json.load(sys.stdin)["runId"])')
path_id=${run_id//\//~2F}
for _ in $(seq 1 60); do
  status=$(curl -sf -H "Authorization: Bearer $key" "$base/runs/$path_id" \
    | .venv/bin/python -c 'import json,sys; print(json.load(sys.stdin)["status"])')
  [ "$status" = completed ] && break
  sleep 1
done
[ "$status" = completed ] || { echo "the demo run did not complete: $status"; tail -50 run.log var/worker.log; exit 1; }
echo "newcomer: make run answers on $base and ran $run_id to completion"
trap - EXIT
stop
for _ in $(seq 1 30); do [ -e var/pg/postmaster.pid ] || break; sleep 1; done
[ ! -e var/pg/postmaster.pid ] || { echo "the embedded PostgreSQL outlived make run"; tail -20 var/pg/log; exit 1; }
echo "newcomer: Ctrl-C stopped the host and its embedded PostgreSQL (data kept in var/pg)"
# The suite's own fresh-clone test already plays `make setup` and the printed commands without any
# variable; here, the live protocol tests on a throwaway embedded PostgreSQL without Redis.
make test TEST_WORKERS=2 PYTEST_ARGS="tests/test_settings.py tests/a2a/test_live_sdk.py tests/mcp/test_live_sdk.py \
  tests/runs/test_live_client.py tests/core/test_readiness.py tests/doors/test_stream_slots.py"
