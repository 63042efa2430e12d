"""GET /readyz (apps/core/readiness.py) against the real services: ready when the database, the
broker and the channel layer answer and a worker consuming the runs' queue heartbeats; 503 naming
each one that does not (refused, or accepting and then silent), within the deadline, and never with
a password in the body or the log."""

from __future__ import annotations

import json
import signal
import socket
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from channels_redis.core import RedisChannelLayer
from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models.functions import Now
from django.test import Client

from apps.core.heartbeats import worker_heartbeat_beat
from apps.core.models import WorkerHeartbeat
from apps.core.readiness import NoLiveWorker, check_broker, check_worker, readiness_body, readiness_failures
from tests.live import free_port, pooled_env, start_celery_worker, start_web, wait_until

PASSWORD = "readyz-pw-5b8e2c71d4"


def _database_at(host: str, port: int) -> BaseDatabaseWrapper:
    """A real PostgreSQL connection of this test's settings that cannot reach a database: at
    `host:port`, with a password."""
    default = connections["default"]
    options = {k: v for k, v in default.settings_dict["OPTIONS"].items() if k != "pool"}
    settings_dict = {**default.settings_dict, "OPTIONS": options}
    settings_dict.update(HOST=host, PORT=str(port), PASSWORD=PASSWORD)
    return type(default)(settings_dict, "readyz-unreachable")


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections (the kernel's backlog) and never says a word."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield int(sock.getsockname()[1])


@pytest.fixture
def live_heartbeat(transactional_db: None, settings: Any) -> str:
    """A worker's heartbeat for this host's runs' queue, committed (the checks run on threads of
    their own, with connections of their own): the worker check passes."""
    worker_heartbeat_beat(worker="celery@readyz-test/1", queues=[settings.CELERY_TASK_DEFAULT_QUEUE])
    return "celery@readyz-test/1"


def _assert_no_secret(*texts: str) -> None:
    for text in texts:
        assert PASSWORD not in text
        assert "Traceback" not in text


def test_ready_answers_200_through_django(live_heartbeat: str, client: Client) -> None:
    response = client.get("/readyz")
    assert response.status_code == 200
    body = response.json()
    assert body.pop("status") == "ready" and set(body) == {"backends"}
    # Which back ends, never where: no URL, host or password.
    assert set(body["backends"]) == {"database", "broker", "channelLayer", "counters"}
    assert all(value.replace("-", "").isalpha() for value in body["backends"].values()), body
    assert response["Cache-Control"] == "no-store"
    assert "OpenWOP-Version" not in response  # not the REST wire, like /healthz
    assert client.get("/healthz").content == b"ok"  # liveness unchanged


async def test_every_check_passes_against_this_hosts_services(live_heartbeat: str) -> None:
    assert await readiness_failures() == []


async def test_an_unreachable_database_is_named(live_heartbeat: str, caplog: pytest.LogCaptureFixture) -> None:
    failing = await readiness_failures(database=_database_at("127.0.0.1", free_port()))
    assert failing == ["database"]
    status, body = readiness_body(failing)
    reasons = {"database": "the database did not answer"}
    assert (status, body) == (503, {"status": "not-ready", "failing": ["database"], "reasons": reasons})
    # Refused: the driver's error, by its class name only.
    assert "readiness check database failed: OperationalError" in caplog.messages
    _assert_no_secret(json.dumps(body), caplog.text)


async def test_an_unreachable_channel_layer_is_named(live_heartbeat: str, caplog: pytest.LogCaptureFixture) -> None:
    layer = RedisChannelLayer(hosts=[f"redis://:{PASSWORD}@127.0.0.1:{free_port()}/0"])
    failing = await readiness_failures(channel_layer=layer)
    assert failing == ["channel-layer"]
    assert "readiness check channel-layer failed: ConnectionError" in caplog.messages
    _assert_no_secret(json.dumps(readiness_body(failing)[1]), caplog.text)


def test_an_unreachable_broker_answers_503_through_django(
    live_heartbeat: str, client: Client, settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    settings.CELERY_TASK_ALWAYS_EAGER = False
    settings.CELERY_BROKER_URL = f"redis://:{PASSWORD}@127.0.0.1:{free_port()}/0"
    response = client.get("/readyz")
    assert response.status_code == 503
    assert {**response.json(), "backends": None} == {
        "status": "not-ready", "failing": ["broker"], "reasons": {"broker": "the Celery broker did not answer"},
        "backends": None,
    }  # fmt: skip
    assert response.json()["backends"]["broker"] == "redis"
    _assert_no_secret(response.content.decode(), caplog.text)


def test_an_unreachable_channel_layer_answers_503_through_django(
    live_heartbeat: str, client: Client, settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [f"redis://:{PASSWORD}@127.0.0.1:{free_port()}/0"]},
        }
    }
    assert isinstance(get_channel_layer(), RedisChannelLayer)
    response = client.get("/readyz")
    assert response.status_code == 503
    body = {**response.json(), "backends": None}
    reasons = {"channel-layer": "the channel layer did not answer"}
    assert body == {"status": "not-ready", "failing": ["channel-layer"], "reasons": reasons, "backends": None}
    assert response.json()["backends"]["channelLayer"] == "redis"
    _assert_no_secret(response.content.decode(), caplog.text)


async def test_hung_dependencies_answer_within_the_deadline(
    live_heartbeat: str, silent_port: int, caplog: pytest.LogCaptureFixture
) -> None:
    """Every dependency accepts the connection and then never answers: each check gives up on its
    own deadline, side by side, so the answer comes in about one deadline, not three or forever."""
    silent = f"redis://:{PASSWORD}@127.0.0.1:{silent_port}/0"
    started = time.monotonic()
    failing = await readiness_failures(
        database=_database_at("127.0.0.1", silent_port),
        broker_url=silent,
        channel_layer=RedisChannelLayer(hosts=[silent]),
    )
    elapsed = time.monotonic() - started
    assert failing == ["database", "broker", "channel-layer"]
    assert elapsed < 3.0
    assert [m.rsplit(": ", 1)[1] for m in caplog.messages if m.startswith("readiness")] == ["TimeoutError"] * 3
    _assert_no_secret(json.dumps(readiness_body(failing)[1]), caplog.text)


def test_brokers_without_a_server(settings: Any, tmp_path: Any) -> None:
    check_broker("memory://")  # in-process: nothing to ask
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {"data_folder_in": str(tmp_path)}
    check_broker("filesystem://")
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {"data_folder_in": str(tmp_path / "missing")}
    with pytest.raises(FileNotFoundError):
        check_broker("filesystem://")
    settings.CELERY_TASK_ALWAYS_EAGER = True
    settings.CELERY_BROKER_URL = f"redis://127.0.0.1:{free_port()}/0"
    check_broker()  # eager: tasks never reach the broker


async def test_no_live_worker_is_named(transactional_db: None, caplog: pytest.LogCaptureFixture) -> None:
    """The queue exists and the broker answers, but nothing consumes it: not ready, and it says so."""
    failing = await readiness_failures()
    assert failing == ["worker"]
    assert readiness_body(failing) == (
        503, {"status": "not-ready", "failing": ["worker"], "reasons": {"worker": "no live worker"}}
    )  # fmt: skip
    assert "readiness check worker failed: NoLiveWorker" in caplog.messages


def test_no_live_worker_answers_503_through_django(transactional_db: None, client: Client) -> None:
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["failing"] == ["worker"]
    assert response.json()["reasons"] == {"worker": "no live worker"}


def test_a_replica_is_ready_without_a_live_worker(transactional_db: None, client: Client) -> None:
    """What a balancer asks of one web replica leaves the workers out: it serves without them, and
    pulling every replica because the workers died would stop the doors as well."""
    assert client.get("/readyz").status_code == 503
    response = client.get("/readyz", {"scope": "replica"})
    assert response.status_code == 200, response.content
    assert response.json()["status"] == "ready"


def test_a_stale_heartbeat_or_another_queues_is_no_live_worker(transactional_db: None, settings: Any) -> None:
    failures = async_to_sync(readiness_failures)
    queue = settings.CELERY_TASK_DEFAULT_QUEUE
    worker_heartbeat_beat(worker="celery@elsewhere/7", queues=[f"{queue}-other"])
    assert failures() == ["worker"]  # alive, but consuming another queue only
    worker_heartbeat_beat(worker="celery@here/8", queues=[queue, f"{queue}-push"])
    assert failures() == []
    # Its last beat an hour ago: it died without a word (SIGKILL, a lost machine).
    WorkerHeartbeat.objects.filter(worker="celery@here/8").update(beat_at=Now() - timedelta(hours=1))
    assert failures() == ["worker"]


def test_eager_or_heartbeats_off_need_no_worker(transactional_db: None, settings: Any) -> None:
    settings.CELERY_TASK_ALWAYS_EAGER = True
    check_worker()  # tasks run in the caller: no worker to wait for
    settings.CELERY_TASK_ALWAYS_EAGER = False
    with pytest.raises(NoLiveWorker):
        check_worker()
    settings.OPENWOP_WORKER_HEARTBEAT_SECONDS = 0
    check_worker()  # the operator turned heartbeats off


@pytest.mark.slow
def test_readyz_reports_a_dead_worker_through_a_live_host(
    transactional_db: None, live_env: tuple[dict[str, str], Path], tmp_path: Path
) -> None:
    """A real worker heartbeats (every second here): readyz is 200. SIGKILLed, it writes no more and
    readyz says "no live worker" once its last beat is three periods old; a worker stopped
    cleanly (SIGTERM) removes its row, so readyz says it at once."""
    env, _ = live_env
    env = pooled_env(env, size=4, timeout=5, queue_suffix="readyz")
    env["OPENWOP_WORKER_HEARTBEAT_SECONDS"] = "1"
    web, base_url = start_web(env, tmp_path)
    worker = start_celery_worker(env, tmp_path, name="readyz")
    try:

        def readyz() -> tuple[int, dict[str, Any]]:
            response = httpx.get(f"{base_url}/readyz", timeout=10)
            return response.status_code, response.json()

        wait_until(lambda: readyz()[0] == 200, "the worker's first heartbeat made readyz 200", timeout=120)
        worker.proc.send_signal(signal.SIGKILL)
        worker.proc.wait(timeout=30)
        _, body = wait_until(lambda: (r := readyz())[0] == 503 and r, "readyz noticed the dead worker", 60)
        assert body["failing"] == ["worker"] and body["reasons"] == {"worker": "no live worker"}, body

        second = start_celery_worker(env, tmp_path, name="readyz2")
        wait_until(lambda: readyz()[0] == 200, "a new worker made readyz 200 again", timeout=120)
        second.stop()  # SIGTERM: a warm shutdown, which removes its row
        assert second.proc.returncode is not None
        assert readyz()[1]["failing"] == ["worker"]
    finally:
        worker.stop(kill=True)
        web.stop()
