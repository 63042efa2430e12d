# The two commands of the contract (DESIGN.md): `make run` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
HOST ?= 127.0.0.1
PORT ?= 8000
# The A2A gRPC binding `make run` starts beside the web server; the card lists it (OPENWOP_GRPC_*).
GRPC_PORT ?= 50051
# HOST as a URL authority (an IPv6 address in brackets), for the URLs `make run` advertises.
URL_HOST = $(if $(findstring :,$(HOST)),[$(HOST)],$(HOST))
TEST_WORKERS ?= auto
, := ,
export DJANGO_DEBUG ?= 1

.PHONY: install setup run test psql lint worker clean bench bench-quick fuzz soak

# Installs come from the lock files (requirements/README.md): every package pinned with its hashes,
# then the project itself, built by the locked setuptools. `make lock` refreshes them.
PIP_LOCKED = $(BIN)/python -m pip install -q --require-hashes --no-deps -r
PIP_PROJECT = $(BIN)/python -m pip install -q --no-deps --no-build-isolation -e .
$(STAMP): pyproject.toml requirements/test.lock
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(PIP_LOCKED) requirements/test.lock
	$(PIP_PROJECT)
	touch $(STAMP)

install: $(STAMP)

UV_COMPILE = $(BIN)/uv pip compile --quiet --generate-hashes --universal --python-version 3.11 \
  --custom-compile-command "make lock" $(LOCK_ARGS)
.PHONY: lock
lock: install
	$(UV_COMPILE) pyproject.toml requirements/build.in requirements/tools.in --extra test -o requirements/test.lock
	$(UV_COMPILE) pyproject.toml requirements/build.in -c requirements/test.lock -o requirements/main.lock
	$(UV_COMPILE) pyproject.toml requirements/build.in requirements/tools.in --extra test --extra bench \
	  -c requirements/test.lock -o requirements/bench.lock
	$(UV_COMPILE) pyproject.toml requirements/build.in requirements/tools.in --extra test --extra chart \
	  -c requirements/test.lock -o requirements/chart.lock
	$(UV_COMPILE) pyproject.toml requirements/build.in requirements/tools.in --extra test --extra docs \
	  -c requirements/test.lock -o requirements/docs.lock

# With DEBUG on, `make run` binds loopback only (issue 33 item 7): DEBUG pages list every URL
# pattern and the development secret may be public; settings and the ASGI app refuse too
# (openwop_host/loopback_only.py). `+`: it refuses under `make -n` as well.
.PHONY: debug-loopback-guard
debug-loopback-guard:
	+@case "$$(printf '%s' "$$DJANGO_DEBUG" | tr A-Z a-z)" in 1|true|yes|y|on|ok) \
	  printf '%s\n' '$(HOST)' | grep -Eqx '127(\.[0-9]{1,3}){3}|localhost|::1|\[::1\]' || { \
	    echo "make run: refusing HOST=$(HOST): with DJANGO_DEBUG=$$DJANGO_DEBUG the host serves loopback only" \
	      "(127.0.0.1, localhost, ::1). To serve a network, run it with DJANGO_DEBUG=0 and a DJANGO_SECRET_KEY." >&2; \
	    exit 2; };; esac

# One `make run` per checkout (openwop_host/supervise.py holds var/run.lock): refused before setup.
.PHONY: run-lock-guard
run-lock-guard:
	@! test -x $(BIN)/python || $(BIN)/python -m openwop_host.supervise --check

# A development .env (git-ignored, read by settings): DEBUG on and a secret generated once, kept
# across restarts, so commands pasted in another shell (`.venv/bin/python manage.py ...`) work too.
.env: | $(STAMP)
	@umask 077 && { echo "# Development settings written by make setup; never used in production."; \
	  echo "DJANGO_DEBUG=1"; \
	  echo "DJANGO_SECRET_KEY=$$($(BIN)/python -c 'import secrets; print(secrets.token_urlsafe(50))')"; } > .env
	@echo "wrote .env (DJANGO_DEBUG=1, a generated DJANGO_SECRET_KEY)"

# Zero setup: an embedded PostgreSQL under var/pg (unless DATABASE_URL is set), filesystem Celery
# broker under var/, in-memory channel layer.
# umask 077: what these write under var/ (the demo key, broker messages) is this user's only.
setup: install .env
	umask 077 && $(BIN)/python manage.py migrate --noinput -v 0
	umask 077 && $(BIN)/python manage.py seed_demo
	@umask 077 && { test -s var/demo-api-key || $(BIN)/python manage.py create_api_key --tenant demo --label "make run demo key" > var/demo-api-key; } && chmod 600 var/demo-api-key
	@# The development host signs its agent cards (a host SHOULD); a key already active is kept.
	@umask 077 && $(BIN)/python manage.py card_key generate --algorithm EdDSA --activate --if-none-active --actor "make setup" > /dev/null

# Cards and facets advertise where this host listens (issue 32): OPENWOP_PUBLIC_URL from HOST and
# PORT unless the environment (or the make command line) sets it; the card's gRPC URL is its host
# and GRPC_PORT (settings), unless OPENWOP_GRPC_URL is set.
run: export OPENWOP_PUBLIC_URL ?= http://$(URL_HOST):$(PORT)
run: export OPENWOP_GRPC_ENABLED = 1
run: export OPENWOP_GRPC_PORT = $(GRPC_PORT)
run: debug-loopback-guard run-lock-guard setup
	@echo ""
	@echo "openwop-host is starting on http://$(URL_HOST):$(PORT)"
	@echo "  advertised  $(OPENWOP_PUBLIC_URL)  (cards, facets: OPENWOP_PUBLIC_URL)"
	@echo "  start here  http://$(URL_HOST):$(PORT)/  (links the console, admin, docs, discovery, API reference)"
	@echo "  discovery   http://$(URL_HOST):$(PORT)/.well-known/openwop"
	@echo "  OpenAPI     http://$(URL_HOST):$(PORT)/openapi.json  (read as a page: /host/openwop-host/api-docs)"
	@echo "  admin       http://$(URL_HOST):$(PORT)/admin/  ($(BIN)/python manage.py createsuperuser)"
	@echo "  console     http://$(URL_HOST):$(PORT)/console/  ($(BIN)/python manage.py console_member_create --tenant demo --username <name>)"
	@echo "  demo key    $$(cat var/demo-api-key)   (tenant demo: Authorization: Bearer <key>)"
	@echo "  more keys   $(BIN)/python manage.py create_api_key --tenant <slug>"
	@echo "  A2A gRPC    $(HOST):$(GRPC_PORT)  (log var/grpc.log)"
	@echo "  worker log  var/worker.log"
	@echo "  beat        periodic jobs: facet refresh, stuck-run sweeper, scheduled floors (log var/beat.log)"
	@echo "  database    $(if $(DATABASE_URL),PostgreSQL of DATABASE_URL,embedded PostgreSQL under var/pg (make psql; set DATABASE_URL for your own))"
	@echo "  redis       $(if $(REDIS_URL),REDIS_URL,none: in-process channel layer and counters$(,) filesystem broker under var/)"
	@echo "  watched     a child or the embedded PostgreSQL that dies is started again; one make run per checkout (var/run.lock)"
	@echo ""
	@# openwop_host/supervise.py: starts these (NAME LOG COMMAND), restarts the ones that die, stops them all on Ctrl-C.
	@$(BIN)/python -m openwop_host.supervise \
	  --child "worker var/worker.log $(BIN)/celery -A openwop_host worker --pool threads --concurrency 16 --loglevel info" \
	  --child "beat var/beat.log $(BIN)/celery -A openwop_host beat --schedule var/celerybeat-schedule --loglevel info" \
	  --child "grpc var/grpc.log $(BIN)/python manage.py grpc_serve --bind $(HOST) --port $(GRPC_PORT)" \
	  --child "web - $(BIN)/uvicorn openwop_host.asgi:application --host $(HOST) --port $(PORT) \
	    --loop uvloop --http httptools --lifespan off --no-proxy-headers"

# On the PostgreSQL of DATABASE_URL, else on a throwaway embedded PostgreSQL (a temporary folder,
# stopped and deleted after the run); on Redis when REDIS_URL is set.
test: install
	$(if $(DATABASE_URL),,$(BIN)/python -m openwop_host.embedded_postgres throwaway --) \
	  $(BIN)/python -m pytest -n $(TEST_WORKERS) $(PYTEST_ARGS)

# Several replicas on one PostgreSQL and one Redis behind HAProxy (issue 37; scripts/cluster.py):
# 2 web, 2 gRPC, 2 workers, 1 beat. DATABASE_URL / REDIS_URL (defaults: local openwop_cluster, Redis
# db 0); CLUSTER_PORT (8100) and CLUSTER_GRPC_PORT (8101) for the balancer; addresses, pids and logs
# under var/cluster/. Every variable given to `make cluster` reaches every process.
.PHONY: cluster cluster-stop cluster-test
cluster: install
	$(BIN)/python scripts/cluster.py start

cluster-stop:
	$(BIN)/python scripts/cluster.py stop

# The cross-replica tests (tests/cluster): they start a cluster of their own (database
# DATABASE_URL's server with a database <name>_cluster, unless CLUSTER_TEST_DATABASE_URL; Redis of
# CLUSTER_TEST_REDIS_URL, else REDIS_URL's server, db 14). Excluded from `make test` (tests/conftest.py).
cluster-test: install
	OPENWOP_CLUSTER_TESTS=1 $(BIN)/python -m pytest -p no:xdist -p no:cacheprovider tests/cluster $(PYTEST_ARGS)

# This release upgrades the one named in deploy/upgrade-from while it serves (scripts/upgrade_test.py,
# docs/operators/upgrading.md): that release installed from this repository's history under
# var/upgrade-test/, a seeded database (UPGRADE_TEST_DATABASE_URL, default DATABASE_URL's server,
# <name>_upgrade), a mixed load while this release migrates and replaces its processes one by one.
.PHONY: upgrade-test
upgrade-test: install
	$(BIN)/python scripts/upgrade_test.py

# psql on the embedded server of `make run` (DATABASE_URL unset; starts it if the host is down).
psql: install
	$(BIN)/python -m openwop_host.embedded_postgres psql

# Hostile input at volume (issue 12): FUZZ_EXAMPLES random cases per door (A2A, MCP) and for the
# REST surface (schemathesis); the normal suite runs a derandomized few hundred.
FUZZ_EXAMPLES ?= 10000
FUZZ_REST_EXAMPLES ?= 2000
fuzz: install
	FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(BIN)/python -m pytest -p no:cacheprovider -s -q tests/hardening/test_fuzz_doors.py
	FUZZ_EXAMPLES=$(FUZZ_REST_EXAMPLES) $(BIN)/python -m pytest -p no:cacheprovider -s -q tests/hardening/test_fuzz_rest.py

# Mixed traffic against a live host (bench/soak.py): SOAK_SECONDS at SOAK_CONCURRENCY; reports the
# error count (must be 0), RSS growth per process and p99 drift.
SOAK_SECONDS ?= 600
SOAK_CONCURRENCY ?= 64
soak: install
	$(BIN)/python bench/soak.py --seconds $(SOAK_SECONDS) --concurrency $(SOAK_CONCURRENCY)

# ruff, then mypy with the Django and DRF plugins ([tool.mypy] in pyproject.toml; STYLE.md habit 14),
# then the layers contract of apps/ ([tool.importlinter]).
lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy apps openwop_host
	$(BIN)/lint-imports
	$(BIN)/python manage.py makemigrations --check --dry-run
	$(BIN)/python manage.py migrations_lint

# Benchmarks against the reference servers (bench/README.md). Needs wrk, PostgreSQL and Redis;
# BENCH_DATABASE_URL / BENCH_PEER_DATABASE_URL / BENCH_REDIS_URL choose where (databases are created).
BENCH_STAMP := $(VENV)/.bench-stamp
$(BENCH_STAMP): pyproject.toml requirements/bench.lock $(STAMP)
	$(PIP_LOCKED) requirements/bench.lock
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(BIN)/python bench/run.py --push $(BENCH_ARGS)

bench-quick: $(BENCH_STAMP)
	$(BIN)/python bench/run.py --quick $(BENCH_ARGS)

# The Helm chart (deploy/helm/openwop-host, tests/chart): rendered by Helm's own Go SDK
# (helm-python-sdk; no helm binary, no cluster) for its default values and each ci/*-values.yaml,
# every object validated strictly against the Kubernetes schemas (kubernetes-validate) or, for
# HTTPRoute and ServiceMonitor, their CRDs' schemas (npm packages fetched with `npm pack`), and the
# chart's properties asserted on what it renders.
CHART_STAMP := $(VENV)/.chart-stamp
CHART_SCHEMAS := $(VENV)/chart-schemas
CHART_CRD_PACKAGES := @kubernetes-models/gateway-api@0.5.1 @kubernetes-models/prometheus-operator@1.6.3
$(CHART_STAMP): pyproject.toml requirements/chart.lock $(STAMP)
	$(PIP_LOCKED) requirements/chart.lock
	rm -rf $(CHART_SCHEMAS) && mkdir -p $(CHART_SCHEMAS)
	npm pack --silent --pack-destination $(CHART_SCHEMAS) $(CHART_CRD_PACKAGES) > /dev/null
	touch $(CHART_STAMP)

.PHONY: chart-test
chart-test: $(CHART_STAMP)
	OPENWOP_CHART_TESTS=1 OPENWOP_CHART_SCHEMAS=$(CHART_SCHEMAS) \
	  $(BIN)/python -m pytest -p no:cacheprovider -q tests/chart $(PYTEST_ARGS)

clean:
	rm -rf var .pytest_cache .ruff_cache .mypy_cache

# Backups (docs/operators/backup-and-restore.md): `make backup` dumps this host's database with the
# server's own pg_dump (the wheel's for the embedded server) and writes a manifest into TO (default
# backups/<UTC time>, git-ignored); `make restore FROM=<folder>` restores one into this host's
# database, which must be empty. Keep DJANGO_SECRET_KEY (.env in development) apart from both.
TO ?= backups/$(shell date -u +%Y%m%dT%H%M%SZ)
.PHONY: backup restore
backup: install
	$(BIN)/python manage.py backup --to $(TO)

restore: install
	@test -n "$(FROM)" || { echo "usage: make restore FROM=<backup folder>" >&2; exit 2; }
	$(BIN)/python manage.py restore --from $(FROM)

# The documentation site (mkdocs.yml, docs/): `make docs` serves it with live reload on DOCS_ADDR;
# `make docs-build` builds it into var/site with --strict (a broken link, anchor or nav entry fails),
# as .ci/run does; `make docs-reference` regenerates docs/reference/configuration.md from the settings.
DOCS_STAMP := $(VENV)/.docs-stamp
DOCS_ADDR ?= 127.0.0.1:8001
$(DOCS_STAMP): pyproject.toml requirements/docs.lock $(STAMP)
	$(PIP_LOCKED) requirements/docs.lock
	touch $(DOCS_STAMP)

.PHONY: docs docs-build docs-reference
# Material's banner about MkDocs 2 is not a warning of this site's; the strict build stays strict.
docs docs-build: export NO_MKDOCS_2_WARNING = 1
docs: $(DOCS_STAMP)
	$(BIN)/mkdocs serve --strict --dev-addr $(DOCS_ADDR)

docs-build: $(DOCS_STAMP)
	$(BIN)/python scripts/settings_reference.py --check
	$(BIN)/mkdocs build --strict --site-dir var/site

docs-reference: install
	$(BIN)/python scripts/settings_reference.py
