"""Push fixtures: a test CA, loopback receivers reachable by name through a fake DNS, the loopback
range allowed for these tests only, and the run callers of tests/runs."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme

from apps.core import egress
from apps.push.engine import delivery_attempt
from apps.push.models import Delivery, DeliveryStatus
from tests.core.https_receivers import Behaviour, Receiver, https_receiver
from tests.core.test_egress import FakeDns
from tests.runs.conftest import Caller, acme, caller_for, globex, sent_advances  # noqa: F401 - fixtures

__all__ = ["Caller"]


@pytest.fixture(scope="session")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="session")
def ca_bundle(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> str:
    path = Path(tmp_path_factory.mktemp("push-ca")) / "ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return str(path)


@pytest.fixture(autouse=True)
def dns(monkeypatch: pytest.MonkeyPatch, settings: Any, ca_bundle: str) -> FakeDns:
    # webhooks.md §Egress stays on; only the loopback range is allowed, in these tests only.
    settings.OPENWOP_EGRESS_ALLOW_CIDRS = ["127.0.0.0/8"]
    settings.OPENWOP_EGRESS_CA_BUNDLE = ca_bundle
    settings.OPENWOP_PUSH_BACKOFF_BASE_SECONDS = 0.0  # every retry is due at once
    settings.OPENWOP_PUSH_ATTEMPT_TIMEOUT = 2.0
    fake = FakeDns()
    fake.set("hooks.example.com", ["93.184.216.34"])
    monkeypatch.setattr(egress, "resolve_host", fake)
    return fake


@pytest.fixture
def receiver_for(ca: trustme.CA, dns: FakeDns) -> Iterator[Callable[..., Receiver]]:
    """`receiver_for("name.test", Behaviour(...))`: an HTTPS receiver that name resolves to."""
    from contextlib import ExitStack

    with ExitStack() as stack:

        def _make(name: str = "receiver.test", behaviour: Behaviour | None = None) -> Receiver:
            live = stack.enter_context(https_receiver(ca, name, behaviour=behaviour))
            dns.set(name, ["127.0.0.1"])
            return live

        yield _make


def live_push_env(env: dict[str, str], ca_bundle: str, *, queue: str, **push: str) -> dict[str, str]:
    """The environment of live processes delivering to loopback receivers: a queue of their own,
    the loopback range allowed and the test CA trusted for these processes only (webhooks.md
    §Egress stays on), and the OPENWOP_PUSH_* settings given as `push` (ATTEMPT_TIMEOUT="3", ...)."""
    return {
        **env,
        "OPENWOP_CELERY_QUEUE": f"{env['OPENWOP_CELERY_QUEUE']}-{queue}",
        "OPENWOP_EGRESS_ALLOW_CIDRS": "127.0.0.0/8",
        "OPENWOP_EGRESS_CA_BUNDLE": ca_bundle,
        **{f"OPENWOP_PUSH_{name}": value for name, value in push.items()},
    }


def url_of(receiver: Receiver, name: str = "receiver.test", path: str = "/hook") -> str:
    return f"https://{name}:{receiver.port}{path}"


def deliveries() -> list[Delivery]:
    return list(Delivery.unscoped_all_tenants.order_by("id"))


def drive(delivery: Delivery, *, limit: int = 20) -> Delivery:
    """Attempt a delivery until it settles (backoff is zero in these tests), in-process."""
    for _ in range(limit):
        delivery_attempt(delivery_pk=delivery.pk)
        delivery.refresh_from_db()
        if delivery.status != DeliveryStatus.PENDING:
            break
    return delivery
