"""GET /readyz (apps/core/readiness.py) against the real services: ready when the database, the
broker and the channel layer answer; 503 naming each one that does not (refused, or accepting and
then silent), within the deadline, and never with a password in the body or the log."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
from channels.layers import get_channel_layer
from channels_redis.core import RedisChannelLayer
from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.test import Client

from apps.core.readiness import check_broker, readiness_body, readiness_failures
from tests.live import free_port

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


def _assert_no_secret(*texts: str) -> None:
    for text in texts:
        assert PASSWORD not in text
        assert "Traceback" not in text


def test_ready_answers_200_through_django(db: Any, client: Client) -> None:
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


async def test_every_check_passes_against_this_hosts_services(db: Any) -> None:
    assert await readiness_failures() == []


async def test_an_unreachable_database_is_named(db: Any, caplog: pytest.LogCaptureFixture) -> None:
    failing = await readiness_failures(database=_database_at("127.0.0.1", free_port()))
    assert failing == ["database"]
    status, body = readiness_body(failing)
    assert (status, body) == (503, {"status": "not-ready", "failing": ["database"]})
    # Refused: the driver's error, by its class name only.
    assert "readiness check database failed: OperationalError" in caplog.messages
    _assert_no_secret(json.dumps(body), caplog.text)


async def test_an_unreachable_channel_layer_is_named(db: Any, caplog: pytest.LogCaptureFixture) -> None:
    layer = RedisChannelLayer(hosts=[f"redis://:{PASSWORD}@127.0.0.1:{free_port()}/0"])
    failing = await readiness_failures(channel_layer=layer)
    assert failing == ["channel-layer"]
    assert "readiness check channel-layer failed: ConnectionError" in caplog.messages
    _assert_no_secret(json.dumps(readiness_body(failing)[1]), caplog.text)


def test_an_unreachable_broker_answers_503_through_django(
    db: Any, client: Client, settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    settings.CELERY_TASK_ALWAYS_EAGER = False
    settings.CELERY_BROKER_URL = f"redis://:{PASSWORD}@127.0.0.1:{free_port()}/0"
    response = client.get("/readyz")
    assert response.status_code == 503
    assert {**response.json(), "backends": None} == {"status": "not-ready", "failing": ["broker"], "backends": None}
    assert response.json()["backends"]["broker"] == "redis"
    _assert_no_secret(response.content.decode(), caplog.text)


def test_an_unreachable_channel_layer_answers_503_through_django(
    db: Any, client: Client, settings: Any, caplog: pytest.LogCaptureFixture
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
    assert body == {"status": "not-ready", "failing": ["channel-layer"], "backends": None}
    assert response.json()["backends"]["channelLayer"] == "redis"
    _assert_no_secret(response.content.decode(), caplog.text)


async def test_hung_dependencies_answer_within_the_deadline(
    db: Any, silent_port: int, caplog: pytest.LogCaptureFixture
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
