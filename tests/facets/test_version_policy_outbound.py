"""A tenant's version policy binds its outbound exchanges too (issue 24; apps/peers/outbound.py):
an `a2a.call` naming a version below the tenant's floor (above the host's) is refused before a byte
is sent, its record carrying the tenant's floor; the same version is still the host floor's to
accept for a tenant without a policy."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from apps.facets.negotiation import negotiation_precheck
from apps.facets.servable import register_servable_versions, servable_versions, unregister_servable_versions
from apps.facets.services import facet_ensure, facet_update, version_policy_set
from apps.runs.models import RunStatus
from apps.tenants.models import Tenant
from tests.peers.conftest import Caller, decisions, run_node
from tests.runs.conftest import acme, caller_for, sent_advances  # noqa: F401 - fixtures

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def a2a_09_and_10() -> Iterator[None]:
    added = {"0.9"} - servable_versions("a2a")
    register_servable_versions("a2a", added)
    try:
        facet_ensure(protocol="a2a")
        facet_update(protocol="a2a", changes={"versions": ["1.0", "0.9"], "minimum_version": "0.9"}, actor="test")
        yield
    finally:
        unregister_servable_versions("a2a", added)


def test_an_outbound_call_below_the_tenants_floor_is_refused_before_sending(
    acme: Caller,  # noqa: F811
    a2a_09_and_10: None,
) -> None:
    version_policy_set(tenant=Tenant.objects.get(slug="acme"), agent=None, protocol="a2a", minimum="1.0", actor="t")
    # No peer listens at this origin: a refusal must come before any connection is tried.
    run = run_node(acme, "a2a.call", {"url": "https://a2a-peer.invalid", "text": "hi", "version": "0.9"})

    assert run.status == RunStatus.FAILED and run.error["code"] == "interop_version_unsupported", run.error
    [decided] = decisions(run)
    assert (decided["outcome"], decided["reason"], decided["floor"], decided["requested"]) == (
        "refused",
        "below-floor",
        "1.0",
        "0.9",
    )
    # The control: for a tenant without a policy the host floor 0.9 admits the same version.
    other = negotiation_precheck(protocol="a2a", requested="0.9", peer_offers=None, authenticated=True, tenant="globex")
    assert (other.outcome, other.floor) == ("accepted", "0.9")
