"""Settings contract: production refuses a missing secret; the environment picks the backends."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _setup(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DATABASE_URL", "REDIS_URL"))}
    # Never the checkout's own development .env (make setup writes one): each test says which file.
    base["OPENWOP_ENV_FILE"] = str(Path(env["OPENWOP_VAR_DIR"]) / "absent.env")
    base.update(env)
    code = (
        "import django, json; django.setup(); from django.conf import settings as s;"
        "from apps.core.readiness import backends_in_use;"
        "print(json.dumps([s.DATABASES['default']['ENGINE'], s.CHANNEL_LAYERS['default']['BACKEND'],"
        " s.CELERY_BROKER_URL.split(':')[0], backends_in_use()]))"
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**base, "DJANGO_SETTINGS_MODULE": "openwop_host.settings"},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_production_refuses_to_start_without_a_secret_key(tmp_path: Path) -> None:
    result = _setup({"DJANGO_DEBUG": "0", "OPENWOP_VAR_DIR": str(tmp_path)})
    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY is required" in result.stderr


def test_development_dotenv_is_read_and_the_environment_wins(embedded_tmp: Path) -> None:
    tmp_path = embedded_tmp
    """make setup's .env turns DEBUG on with its own secret; a variable set in the environment wins."""
    dotenv = tmp_path / ".env"
    dotenv.write_text("DJANGO_DEBUG=1\nDJANGO_SECRET_KEY=" + "d" * 60 + "\n")
    code = "import django; django.setup(); from django.conf import settings as s; print(s.DEBUG, s.SECRET_KEY[:3])"
    base = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DATABASE_URL", "REDIS_URL"))}
    base.update(OPENWOP_VAR_DIR=str(tmp_path), OPENWOP_ENV_FILE=str(dotenv))
    base["DJANGO_SETTINGS_MODULE"] = "openwop_host.settings"
    outputs = []
    for extra in ({}, {"DJANGO_DEBUG": "0"}, {"DJANGO_SECRET_KEY": "e" * 60}):
        result = subprocess.run(
            [sys.executable, "-c", code], cwd=ROOT, env={**base, **extra}, capture_output=True, text=True, timeout=60
        )
        assert result.returncode == 0, result.stderr
        outputs.append(result.stdout.split())
    assert outputs == [["True", "ddd"], ["False", "ddd"], ["True", "eee"]]


def test_zero_setup_defaults(embedded_tmp: Path) -> None:
    """No DATABASE_URL: PostgreSQL all the same, an embedded server on a unix socket under the var
    folder, started by the process and stopped when it (its last holder) exits; the data stays."""
    code = (
        "import django, json; django.setup(); from django.conf import settings as s; from django.db import connection;"
        "from apps.core.readiness import backends_in_use;"
        "print(json.dumps([s.DATABASES['default']['ENGINE'], s.DATABASES['default']['HOST'],"
        " connection.cursor().execute('SHOW server_version').fetchone()[0], s.CHANNEL_LAYERS['default']['BACKEND'],"
        " s.CELERY_BROKER_URL.split(':')[0], backends_in_use()]))"
    )
    base = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DATABASE_URL", "REDIS_URL"))}
    env = {**base, "DJANGO_DEBUG": "1", "OPENWOP_VAR_DIR": str(embedded_tmp),
           "DJANGO_SETTINGS_MODULE": "openwop_host.settings",
           "OPENWOP_ENV_FILE": str(embedded_tmp / "absent.env")}  # fmt: skip
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    engine, host, version, layer, broker, backends = json.loads(result.stdout.splitlines()[-1])
    # /readyz says so (issue 35): the embedded server, and the in-process stand-ins for Redis.
    assert backends == {"database": "embedded-postgresql", "broker": "filesystem", "channelLayer": "in-process",
                        "counters": "in-process"}  # fmt: skip
    assert engine == "django.db.backends.postgresql"
    assert Path(host) == (embedded_tmp / "pg").resolve() and version.startswith("18")
    assert layer == "channels.layers.InMemoryChannelLayer"
    assert broker == "filesystem"
    assert (embedded_tmp / "pg" / "PG_VERSION").exists()  # kept for the next start
    assert not (embedded_tmp / "pg" / "postmaster.pid").exists(), result.stderr  # stopped with its last process


def test_configured_backends(tmp_path: Path) -> None:
    result = _setup(
        {
            "DJANGO_DEBUG": "0",
            "DJANGO_SECRET_KEY": "k" * 50,
            "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/whatever",
            "REDIS_URL": "redis://127.0.0.1:6379/0",
            "OPENWOP_VAR_DIR": str(tmp_path),
        }
    )
    assert result.returncode == 0, result.stderr
    engine, layer, broker, backends = json.loads(result.stdout)
    assert engine == "django.db.backends.postgresql"
    assert layer == "channels_redis.core.RedisChannelLayer"
    assert broker == "redis"
    assert backends == {"database": "postgresql", "broker": "redis", "channelLayer": "redis", "counters": "redis"}


def test_database_pool_is_opt_in(tmp_path: Path) -> None:
    """DATABASE_POOL_MAX_SIZE turns on Django's psycopg pool (bench/README.md); absent, no pool."""
    code = (
        "import django, json; django.setup(); from django.conf import settings as s;"
        "print(json.dumps(s.DATABASES['default'].get('OPTIONS', {}).get('pool')))"
    )
    url = "postgres://postgres@127.0.0.1:5432/not_connected_to"
    outputs = []
    for extra in ({}, {"DATABASE_POOL_MAX_SIZE": "4"}):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DATABASE_", "REDIS_URL"))}
        env.update(DJANGO_DEBUG="1", DATABASE_URL=url, OPENWOP_VAR_DIR=str(tmp_path), **extra)
        result = subprocess.run(
            [sys.executable, "-c", code], cwd=ROOT, env={**env, "DJANGO_SETTINGS_MODULE": "openwop_host.settings"},
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        outputs.append(json.loads(result.stdout.strip().splitlines()[-1]))
    assert outputs[0] is None
    assert outputs[1] == {"min_size": 2, "max_size": 4, "timeout": 10.0}


def test_debug_serves_loopback_host_names_only(tmp_path: Path) -> None:
    """Issue 33 item 7: with DEBUG on, DJANGO_ALLOWED_HOSTS may name only this machine."""
    # A database URL nothing connects to: settings load without starting a database.
    base = {"DATABASE_URL": "postgres://postgres@127.0.0.1:5432/not_connected_to", "OPENWOP_VAR_DIR": str(tmp_path)}
    for hosts in ("*", "192.168.1.5", "localhost,lan.example", "0.0.0.0"):
        result = _setup({**base, "DJANGO_DEBUG": "1", "DJANGO_ALLOWED_HOSTS": hosts})
        assert result.returncode != 0, hosts
        assert "DJANGO_DEBUG=1 serves loopback only" in result.stderr, result.stderr
    loopback = "localhost,127.0.0.1,127.0.0.2,[::1],app.localhost"
    result = _setup({**base, "DJANGO_DEBUG": "1", "DJANGO_ALLOWED_HOSTS": loopback})
    assert result.returncode == 0, result.stderr
    production = {"DJANGO_DEBUG": "0", "DJANGO_SECRET_KEY": "k" * 50, "DJANGO_ALLOWED_HOSTS": "*"}
    result = _setup({**base, **production})
    assert result.returncode == 0, result.stderr


def test_make_run_refuses_a_non_loopback_host_with_debug() -> None:
    """The Makefile's guard runs even under `make -n`, so nothing else is started to prove it."""
    if shutil.which("make") is None:
        pytest.skip("make is needed to run the Makefile's guard")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DJANGO_")}

    def make_run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["make", "-n", "run", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
        )

    for host in ("0.0.0.0", "192.168.1.5", "::"):
        refused = make_run(f"HOST={host}")
        assert refused.returncode != 0
        assert f"refusing HOST={host}: with DJANGO_DEBUG=1 the host serves loopback only" in refused.stderr
        assert "uvicorn" not in refused.stdout  # stopped before the plan reached the servers
    for args in (("HOST=127.0.0.1",), ("HOST=::1",), ("HOST=0.0.0.0", "DJANGO_DEBUG=0")):
        planned = make_run(*args)
        assert planned.returncode == 0, planned.stderr
        assert "uvicorn openwop_host.asgi:application" in planned.stdout
