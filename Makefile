# The two commands of the contract (DESIGN.md): `make run` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
HOST ?= 127.0.0.1
PORT ?= 8000
# The A2A gRPC binding `make run` starts beside the web server; the card lists it (OPENWOP_GRPC_*).
GRPC_PORT ?= 50051
TEST_WORKERS ?= auto
export DJANGO_DEBUG ?= 1

.PHONY: install setup run test lint worker clean bench bench-quick fuzz soak

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

# A development .env (git-ignored, read by settings): DEBUG on and a secret generated once, kept
# across restarts, so commands pasted in another shell (`.venv/bin/python manage.py ...`) work too.
.env: | $(STAMP)
	@umask 077 && { echo "# Development settings written by make setup; never used in production."; \
	  echo "DJANGO_DEBUG=1"; \
	  echo "DJANGO_SECRET_KEY=$$($(BIN)/python -c 'import secrets; print(secrets.token_urlsafe(50))')"; } > .env
	@echo "wrote .env (DJANGO_DEBUG=1, a generated DJANGO_SECRET_KEY)"

# Zero setup: SQLite under var/, filesystem Celery broker under var/, in-memory channel layer.
setup: install .env
	$(BIN)/python manage.py migrate --noinput -v 0
	$(BIN)/python manage.py seed_demo
	@test -s var/demo-api-key || $(BIN)/python manage.py create_api_key --tenant demo --label "make run demo key" > var/demo-api-key

run: export OPENWOP_GRPC_ENABLED = 1
run: export OPENWOP_GRPC_URL = $(HOST):$(GRPC_PORT)
run: setup
	@echo ""
	@echo "openwop-host is starting on http://$(HOST):$(PORT)"
	@echo "  discovery   http://$(HOST):$(PORT)/.well-known/openwop"
	@echo "  OpenAPI     http://$(HOST):$(PORT)/openapi.json"
	@echo "  admin       http://$(HOST):$(PORT)/admin/  ($(BIN)/python manage.py createsuperuser)"
	@echo "  console     http://$(HOST):$(PORT)/console/  ($(BIN)/python manage.py console_member_create --tenant demo --username <name>)"
	@echo "  demo key    $$(cat var/demo-api-key)   (tenant demo: Authorization: Bearer <key>)"
	@echo "  more keys   $(BIN)/python manage.py create_api_key --tenant <slug>"
	@echo "  A2A gRPC    $(HOST):$(GRPC_PORT)  (log var/grpc.log)"
	@echo "  worker log  var/worker.log"
	@echo ""
	@$(BIN)/celery -A openwop_host worker --pool threads --concurrency 16 --loglevel info > var/worker.log 2>&1 & \
	  worker=$$!; \
	  $(BIN)/python manage.py grpc_serve --bind $(HOST) --port $(GRPC_PORT) > var/grpc.log 2>&1 & \
	  grpc=$$!; trap 'kill $$worker $$grpc 2>/dev/null' EXIT INT TERM; \
	  $(BIN)/uvicorn openwop_host.asgi:application --host $(HOST) --port $(PORT) \
	    --loop uvloop --http httptools --lifespan off --no-proxy-headers

# With DATABASE_URL / REDIS_URL set the suite runs on PostgreSQL / Redis, otherwise on SQLite.
test: install
	$(BIN)/python -m pytest -n $(TEST_WORKERS) $(PYTEST_ARGS)

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

# ruff, then mypy with the Django and DRF plugins ([tool.mypy] in pyproject.toml; STYLE.md habit 14).
lint: install
	$(BIN)/ruff check .
	$(BIN)/mypy apps openwop_host

# Benchmarks against the reference servers (bench/README.md). Needs wrk, PostgreSQL and Redis;
# BENCH_DATABASE_URL / BENCH_PEER_DATABASE_URL / BENCH_REDIS_URL choose where (databases are created).
BENCH_STAMP := $(VENV)/.bench-stamp
$(BENCH_STAMP): pyproject.toml $(STAMP)
	$(BIN)/python -m pip install -q -e '.[test,bench]'
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(BIN)/python bench/run.py --push $(BENCH_ARGS)

bench-quick: $(BENCH_STAMP)
	$(BIN)/python bench/run.py --quick $(BENCH_ARGS)

clean:
	rm -rf var .pytest_cache .ruff_cache .mypy_cache
