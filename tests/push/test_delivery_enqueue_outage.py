"""`push.deliver` while the broker refuses connections (issue 32 item 8, as `runs.advance`): the
send after commit never turns a committed change into an error; it is logged (the error's class, no
URL), the row stays pending and due, and the sweeper sends it once the broker is back. The broker is
a real kombu connection to a loopback port nothing listens on."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from apps.push.services import delivery_enqueue
from openwop_host.celery import app
from tests.live import free_port


def _publishers_reset() -> None:
    app._pool = None
    app.amqp._producer_pool = None


@pytest.fixture
def refused_broker() -> Iterator[str]:
    original, refused = app.conf.broker_url, f"redis://:pw-not-logged@127.0.0.1:{free_port()}/0"
    app.conf.broker_url = refused
    _publishers_reset()
    try:
        yield refused
    finally:
        app.conf.broker_url = original
        _publishers_reset()


def test_a_push_the_broker_refuses_is_logged_not_raised(refused_broker: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        delivery_enqueue(delivery_pk=4242, queue="openwop-push-outage", countdown=0.0)  # raised before
    [record] = [r for r in caplog.records if "push.deliver not sent" in r.getMessage()]
    assert "delivery 4242" in record.getMessage() and "(OperationalError)" in record.getMessage()
    assert record.exc_info is None and "pw-not-logged" not in caplog.text and refused_broker not in caplog.text
