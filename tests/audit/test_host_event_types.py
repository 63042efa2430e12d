"""The registry of host-event types: one class per type, names in the host-event grammar."""

from __future__ import annotations

import pytest

from apps.audit import host_event_types
from apps.audit.errors import UnregisteredHostEventType
from apps.audit.host_event_types import Delivery, host_event_type, register_host_event_type


@pytest.fixture(autouse=True)
def _private_registry(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # Registrations made here must not leak into discovery for later tests in this process.
    monkeypatch.setattr(host_event_types, "_registry", dict(host_event_types._registry))


def test_builtin_types_and_their_classes() -> None:
    assert host_event_type("negotiation.decided").delivery is Delivery.DURABLE
    assert host_event_type("host-test.durable-triggered").delivery is Delivery.DURABLE
    assert host_event_type("host-test.ephemeral-triggered").delivery is Delivery.EPHEMERAL


def test_registering_again_is_idempotent_but_a_class_change_is_refused() -> None:
    first = register_host_event_type("example.thing-happened", delivery=Delivery.DURABLE)
    assert register_host_event_type("example.thing-happened", delivery=Delivery.DURABLE) is first
    with pytest.raises(ValueError, match="already registered"):
        register_host_event_type("example.thing-happened", delivery=Delivery.EPHEMERAL)


@pytest.mark.parametrize("name", ["nodot", "Upper.case", "run.completed.extra", "openwop.x_y", ".x", "a."])
def test_names_follow_the_host_event_grammar(name: str) -> None:
    with pytest.raises(ValueError, match="not a host-event type"):
        register_host_event_type(name, delivery=Delivery.DURABLE)


def test_unknown_type() -> None:
    with pytest.raises(UnregisteredHostEventType):
        host_event_type("nobody.registered-this")
