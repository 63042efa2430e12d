"""The delay node's `secondsInput` (what `slow_compute` of the MCP conformance suite sends): the
wait is that many seconds, fractions included; anything but a number from 0 to 600 is refused,
by the fixture's input schema at the door and by the node itself when a schema lets it through."""

from __future__ import annotations

import time

import pytest
from django.utils import timezone

from apps.agents.definitions import node_config_errors
from apps.agents.services import workflow_create
from apps.runs.models import Run, RunStatus
from apps.tenants.models import Tenant
from tests.runs.conftest import Caller, advance
from tests.runs.test_engine import advance_on_clock, node_clock  # noqa: F401 - fixture: the node module's fake clock

pytestmark = pytest.mark.django_db


def _advanced_on_the_fake_clock(run_id: str, clock) -> float:  # type: ignore[no-untyped-def]
    """Advance the run to completion with the node clock starting at the real now (parked, the
    clock jumps to its wake-up); how long the advance really took bounds the gap between that and
    the node's real `node.started`."""
    clock.current = timezone.now()
    began = time.monotonic()
    assert advance_on_clock(run_id, clock).status == RunStatus.COMPLETED
    return time.monotonic() - began


def test_slow_compute_waits_the_seconds_it_is_given(acme: Caller, node_clock) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    run_id = acme.create_run("slow_compute", {"seconds": 2.5, "label": "twice"})
    real_advance = _advanced_on_the_fake_clock(run_id, node_clock)
    assert 2.5 <= node_clock.waited <= 2.5 + real_advance
    outputs = Run.unscoped_all_tenants.get(run_id=run_id).outputs
    assert outputs == {"text": "Computed after 2.5 s.", "label": "twice"}


def test_zero_seconds_does_not_wait(acme: Caller, node_clock) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    real_advance = _advanced_on_the_fake_clock(acme.create_run("slow_compute", {"seconds": 0}), node_clock)
    assert node_clock.waited <= real_advance  # at most the instant between the clock set and node.started


@pytest.mark.parametrize("seconds", [-1, 600.5, "3", True, None])
def test_the_fixture_schema_refuses_bad_seconds_at_the_door(acme: Caller, seconds: object) -> None:
    response = acme.post("/runs", {"workflowId": "slow_compute", "inputs": {"seconds": seconds}})
    assert response.status_code == 400, response.content
    assert not Run.unscoped_all_tenants.filter(workflow__workflow_id="slow_compute").exists()


@pytest.mark.parametrize("seconds", [601, -0.5, "3", True, [1]])
def test_the_node_fails_bad_seconds_a_schema_let_through(acme: Caller, node_clock, seconds: object) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    workflow_create(
        tenant=Tenant.objects.get(slug="acme"),
        workflow_id="loose-delay",
        input_schema={"type": "object"},
        definition={"nodes": [{"id": "wait", "kind": "delay", "config": {"secondsInput": "seconds"}}]},
    )
    run = advance(acme.create_run("loose-delay", {"seconds": seconds}))
    assert run.status == RunStatus.FAILED and node_clock.slept == 0.0
    assert run.error["code"] == "validation_error"
    assert run.error["message"] == "The input 'seconds' is a number of seconds from 0 to 600."


def test_the_config_names_one_input_only() -> None:
    assert node_config_errors("delay", {"secondsInput": "s"}) == []
    assert node_config_errors("delay", {"secondsInput": "s", "delayMsInput": "ms"})
    assert node_config_errors("delay", {"secondsInput": ""})
