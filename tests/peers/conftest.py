"""Peer-call fixtures: the push tests' CA, fake DNS and loopback allowance (the egress guard stays
on; only 127.0.0.0/8 is admitted, in these tests only), the run callers of tests/runs, and helpers
to run a one-node workflow in-process against a real peer."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
import trustme

from apps.agents.services import workflow_create
from apps.peers.services import peer_credential_create
from apps.runs.engine import run_advance
from apps.runs.models import Run, RunEvent
from apps.runs.services import run_create
from apps.tenants.models import Tenant
from tests.core.test_egress import FakeDns
from tests.peers.peer_servers import Peer, https_asgi_peer
from tests.push.conftest import ca, ca_bundle, dns  # noqa: F401 - fixtures
from tests.runs.conftest import Caller, acme, caller_for, globex, sent_advances  # noqa: F401 - fixtures

__all__ = ["Caller"]


@pytest.fixture
def serve(
    ca: trustme.CA,  # noqa: F811 - the imported fixtures
    dns: FakeDns,  # noqa: F811
    tmp_path: Path,
) -> Iterator[Callable[..., Peer]]:
    """`serve(name, app, port=None)`: an HTTPS peer for `name`, which the fake DNS points at 127.0.0.1."""
    with ExitStack() as stack:

        def _serve(name: str, app: Any, port: int | None = None) -> Peer:
            peer = stack.enter_context(https_asgi_peer(ca, name, app, tmp_path, port=port))
            dns.set(name, ["127.0.0.1"])
            return peer

        yield _serve


def run_node(caller: Caller, kind: str, config: dict[str, Any], inputs: dict[str, Any] | None = None) -> Run:
    """Create a one-node workflow of `kind`, run it in-process to its end, return the run."""
    tenant = Tenant.objects.get(slug=caller.tenant)
    workflow_id = f"peer-{kind}-{Run.unscoped_all_tenants.count()}"
    workflow_create(
        tenant=tenant,
        workflow_id=workflow_id,
        definition={"nodes": [{"id": "call", "kind": kind, "config": config}]},
        input_schema={"type": "object"},
    )
    run = run_create(subject=caller.subject, workflow_id=workflow_id, inputs=inputs or {}, transport="rest")
    run_advance(run_id=run.run_id, worker="test-worker")
    return Run.unscoped_all_tenants.get(pk=run.pk)


def events(run: Run, type: str | None = None) -> list[RunEvent]:
    rows = RunEvent.unscoped_all_tenants.filter(run=run).order_by("sequence")
    return list(rows.filter(type=type) if type else rows)


def decisions(run: Run) -> list[dict[str, Any]]:
    return [event.payload for event in events(run, "negotiation.decided")]


def credential_for(caller: Caller, origin: str, secret: str = "peer-secret-1") -> str:
    return peer_credential_create(subject=caller.subject, url=origin + "/", secret=secret).credential_id
