"""Settings contract: production refuses a missing secret; the environment picks the backends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _setup(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DATABASE_URL", "REDIS_URL"))}
    # Never the checkout's own development .env (make setup writes one): each test says which file.
    base["OPENWOP_ENV_FILE"] = str(Path(env["OPENWOP_VAR_DIR"]) / "absent.env")
    base.update(env)
    code = (
        "import django, json; django.setup(); from django.conf import settings as s;"
        "print(json.dumps([s.DATABASES['default']['ENGINE'], s.CHANNEL_LAYERS['default']['BACKEND'],"
        " s.CELERY_BROKER_URL.split(':')[0]]))"
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


def test_development_dotenv_is_read_and_the_environment_wins(tmp_path: Path) -> None:
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


def test_zero_setup_defaults(tmp_path: Path) -> None:
    result = _setup({"DJANGO_DEBUG": "1", "OPENWOP_VAR_DIR": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    engine, layer, broker = json.loads(result.stdout)
    assert engine == "django.db.backends.sqlite3"
    assert layer == "channels.layers.InMemoryChannelLayer"
    assert broker == "filesystem"


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
    engine, layer, broker = json.loads(result.stdout)
    assert engine == "django.db.backends.postgresql"
    assert layer == "channels_redis.core.RedisChannelLayer"
    assert broker == "redis"


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
