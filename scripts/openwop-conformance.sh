#!/usr/bin/env bash
# Run the OpenWOP conformance suite's v2 interop scenarios against a fresh openwop-host on loopback.
#
#   scripts/openwop-conformance.sh /path/to/suite [extra suite/vitest args...]
#
# The suite is the chapter's `@openwop/openwop-conformance` (TypeScript + vitest), kept OUTSIDE this
# repository with its dependencies installed: a checkout of openwop/openwop (this script uses its
# `conformance/` folder), that folder itself, or a folder where the npm package was installed
# (`npm install --legacy-peer-deps @openwop/openwop-conformance @openwop/spec-artifacts`). Node 20+.
#
# This script starts a host like `make run` does (migrate, seed_demo, a Celery worker, uvicorn) on a
# free port, from a fresh embedded PostgreSQL under a temporary OPENWOP_VAR_DIR unless DATABASE_URL
# is set (then that database is migrated and used: give it an empty one), with the conformance seams
# on, then applies the conformance profile (`manage.py conformance_profile apply`: the interface
# routes only conformance-approval, every fixture of the contract, a second tenant with its own key
# and agent, the peer bindings) and exports the variables it prints. The suite starts its own fake
# A2A peer, fake MCP server and webhook receivers on loopback (plain http): the host is told their
# pinned ports before it starts, and its egress guard admits 127.0.0.0/8, over http, for this host
# only. That is a relaxation (security-defaults.md §Relaxations), declared to the suite in
# OPENWOP_HOST_RELAXATIONS: such a run measures behaviour, it cannot certify.
#
# By default the v2 interop scenario files run (SCENARIOS, a regex over src/scenarios/ file names),
# one file at a time, with --target-major 2: through the suite's CLI when it is built or installed,
# else through vitest with OPENWOP_TARGET_MAJOR=2 (the suite's documented equivalent). The log, a
# JUnit report and the suite's ledger land in $OUT (default a new temporary folder, kept and printed); the last lines are the
# pass / fail / skip counts and the suite's own dispositions. KEEP_HOST=1 leaves the host's files.
set -euo pipefail

if [[ $# -lt 1 ]]; then
  echo "usage: $0 /path/to/openwop-checkout-or-conformance-folder [extra args...]" >&2
  exit 2
fi
given=$(cd "$1" && pwd)
shift
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY="$ROOT/.venv/bin/python"
[[ -x "$PY" ]] || { echo "run 'make install' first ($PY missing)" >&2; exit 2; }
case "$given/" in "$ROOT"/*) echo "the suite must live outside this repository" >&2; exit 2;; esac

# The suite's folder: the package (installed or a checkout's conformance/).
if [[ -f "$given/conformance/package.json" ]]; then SUITE="$given/conformance"
elif [[ -f "$given/node_modules/@openwop/openwop-conformance/package.json" ]]; then
  SUITE="$given/node_modules/@openwop/openwop-conformance"
elif [[ -f "$given/package.json" ]] && grep -q '"@openwop/openwop-conformance"' "$given/package.json"; then SUITE="$given"
else echo "no OpenWOP conformance suite in $given (want conformance/package.json or the npm package)" >&2; exit 2
fi
command -v node > /dev/null || { echo "Node 20+ is needed (node not on PATH)" >&2; exit 2; }
[[ -d "$SUITE/node_modules" || -d "$(dirname "$(dirname "$SUITE")")/.bin" ]] || {
  echo "the suite's dependencies are not installed: (cd $SUITE && npm install --legacy-peer-deps)" >&2; exit 2; }

SCENARIOS=${SCENARIOS:-'^v2-(a2a|mcp|negotiation|minimum-version|refresh-sla|legacy-profiles|no-transport|mrtr|interop-trace|credential-interrupt|oauth-mcp-reach|artifact-a2a|callback-url|webhook|bound-id|purpose|approver)|^(inbound-credential-no-passthrough|otel-mcp-semconv-projection)'}
files=()
while IFS= read -r name; do files+=("src/scenarios/$name"); done < <(ls "$SUITE/src/scenarios" | grep -E '\.test\.ts$' | grep -E "$SCENARIOS")
(( ${#files[@]} )) || { echo "no scenario file in $SUITE/src/scenarios matches $SCENARIOS" >&2; exit 2; }

free_port() { "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
WORK=$(mktemp -d "${TMPDIR:-/tmp}/openwop-conformance.XXXXXX")
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/openwop-conformance-results.XXXXXX")}
mkdir -p "$OUT"
PORT=$(free_port)
MCP_PORT=$(free_port)
A2A_PORT=$(free_port)
BASE="http://127.0.0.1:$PORT"
export DJANGO_DEBUG=1 OPENWOP_VAR_DIR="$WORK" OPENWOP_PUBLIC_URL="$BASE" OPENWOP_CONFORMANCE_SEAMS=1
export OPENWOP_CELERY_QUEUE="openwop-conformance-$PORT"  # never share a queue with another host on a shared broker
# The suite's fakes and receivers are plain http on loopback: let this host reach 127.0.0.0/8, over
# http, and nothing else that the guard refuses (webhooks.md §Egress). Declared below.
export OPENWOP_EGRESS_ALLOW_CIDRS="127.0.0.0/8" OPENWOP_EGRESS_ALLOW_HTTP_CIDRS="127.0.0.0/8"
export OPENWOP_MCP_FAKE_SERVER_PORT="$MCP_PORT" OPENWOP_A2A_FAKE_PEER_PORT="$A2A_PORT"
cd "$ROOT"

pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  # The host's files hold the profile's raw keys (profile.env): gone with the host, unless kept.
  if [[ -z "${KEEP_HOST:-}" ]]; then rm -rf "$WORK"; else echo "host files (raw keys included) kept in $WORK"; fi
  echo "results and host logs in $OUT"
}
trap cleanup EXIT INT TERM

"$PY" manage.py migrate --noinput -v 0
"$PY" manage.py seed_demo > /dev/null
# The profile's variables (OPENWOP_BASE_URL, OPENWOP_API_KEY, the second tenant's key and agent,
# the fakes' ports, the declared relaxation) as `export` lines.
"$PY" manage.py conformance_profile apply --actor "script:openwop-conformance" > "$WORK/profile.env"
# shellcheck disable=SC1091
source "$WORK/profile.env"

# No -Q: the worker consumes every queue settings declare (runs, and push on "<queue>-push").
"$ROOT/.venv/bin/celery" -A openwop_host worker --pool threads --concurrency 16 --loglevel info > "$OUT/worker.log" 2>&1 &
pids+=($!)
"$ROOT/.venv/bin/uvicorn" openwop_host.asgi:application --host 127.0.0.1 --port "$PORT" --loop uvloop --http httptools \
  --lifespan off --no-proxy-headers > "$OUT/web.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 150); do
  curl -fsS "$BASE/.well-known/openwop" > /dev/null 2>&1 && break
  sleep 0.2
done
curl -fsS "$BASE/.well-known/openwop" > "$OUT/discovery.json" || { echo "the host did not start:" >&2; tail -20 "$OUT/web.log" >&2; exit 1; }
echo "host on $BASE (profile applied; fake MCP server :$MCP_PORT, fake A2A peer :$A2A_PORT); ${#files[@]} scenario files"

# The CLI when the suite has one built or installed; else vitest itself, one file at a time.
cli=()
if [[ -x "$SUITE/node_modules/.bin/openwop-conformance" ]]; then cli=("$SUITE/node_modules/.bin/openwop-conformance")
elif [[ -f "$SUITE/dist/cli.js" ]]; then cli=(node "$SUITE/dist/cli.js")
fi
# The suite's own verdicts (RFC 0148 §A): a leg that could not run returns early and vitest counts it
# passed, so the dispositions it records (executed-pass / executed-fail / blocked / inapplicable /
# skipped) are the counts that mean something; they land in this JSON-lines ledger.
export OPENWOP_LEDGER_PATH="$OUT/ledger.jsonl"
set +e
if (( ${#cli[@]} )) && "${cli[@]}" --help 2>/dev/null | grep -q -- '--target-major'; then
  (cd "$SUITE" && "${cli[@]}" --base-url "$OPENWOP_BASE_URL" --api-key "$OPENWOP_API_KEY" --target-major 2 \
    --max-workers 1 --filter "$SCENARIOS" "$@") 2>&1 | tee "$OUT/suite.log"
else
  (cd "$SUITE" && OPENWOP_TARGET_MAJOR=2 npx vitest run --no-file-parallelism --maxWorkers 1 \
    --reporter=default --reporter=junit --outputFile.junit="$OUT/junit.xml" "${files[@]}" "$@") 2>&1 | tee "$OUT/suite.log"
fi
status=${PIPESTATUS[0]}
set -e

echo
echo "== OpenWOP conformance, v2 interop ($(cd "$SUITE" && git rev-parse --short HEAD 2>/dev/null || node -p 'require("./package.json").version')) =="
if [[ -f "$OUT/junit.xml" ]]; then
  "$PY" - "$OUT/junit.xml" <<'PYEOF'
"""Pass / fail / skip per scenario file, from the suite's JUnit report."""
import collections
import sys
import xml.etree.ElementTree as ET

counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
for case in ET.parse(sys.argv[1]).getroot().iter("testcase"):
    area = case.get("classname", "?").rsplit("/", 1)[-1]
    failed = case.find("failure") is not None or case.find("error") is not None
    outcome = "failed" if failed else "skipped" if case.find("skipped") is not None else "passed"
    counts[area][outcome] += 1
total: collections.Counter = collections.Counter()
print(f"{'scenario file':56} {'passed':>7} {'failed':>7} {'skipped':>7}")
for area in sorted(counts):
    c = counts[area]
    total.update(c)
    print(f"{area:56} {c['passed']:7} {c['failed']:7} {c['skipped']:7}")
print(f"{'TOTAL':56} {total['passed']:7} {total['failed']:7} {total['skipped']:7}")
print(f"{total['passed']} passed, {total['failed']} failed, {total['skipped']} skipped")
PYEOF
else
  grep -E '^\s*(Test Files|Tests)\s' "$OUT/suite.log" | tail -2 || true
fi
if [[ -s "$OPENWOP_LEDGER_PATH" ]]; then
  "$PY" - "$OPENWOP_LEDGER_PATH" <<'PYEOF'
"""The suite's recorded dispositions, per test (`openwop.it.*` rows) and per scenario file, with the
reason of every leg that did not execute-pass."""
import collections
import json
import sys

rows = {}
for line in open(sys.argv[1], encoding="utf-8"):
    try:
        row = json.loads(line)
    except ValueError:
        continue
    rid = row.get("requirementId") or row.get("id")
    if isinstance(rid, str) and isinstance(row.get("disposition"), str):
        rows[rid] = row  # the last record of an id wins (the suite records each once)
legs = {k: v for k, v in rows.items() if k.startswith("openwop.it.")}
print("dispositions per test: " + ", ".join(f"{n} {d}" for d, n in sorted(collections.Counter(r["disposition"] for r in legs.values()).items())))
for rid, row in sorted(legs.items()):
    if row["disposition"] != "executed-pass":
        print(f"  {row['disposition']:13} {rid}: {str(row.get('detail', ''))[:200]}")
PYEOF
fi
exit "$status"
