from typing import Any

from django.apps import AppConfig


def agents_capability() -> dict[str, Any]:
    """The `agents` record: the inventory (`GET /agents`) is served. `manifestRuntime` is an object
    (openwop-v2 reference, capability table); this host declares no optional runtime fields."""
    return {"status": "stable", "since": "2.46", "witness": "witnessable-gated", "manifestRuntime": {}}


class AgentsConfig(AppConfig):
    name = "apps.agents"
    label = "agents"

    def ready(self) -> None:
        from apps.agents.fixtures import fixture_workflow_ids
        from apps.agents.services import agent_demo_seed, workflow_fixtures_seed
        from apps.core.discovery import register_capability, register_fixture_source
        from apps.tenants.hooks import on_tenant_created

        # Every tenant gets the fixture workflows and the demo agent: on creation, and again
        # (idempotently) on seed_demo.
        on_tenant_created(workflow_fixtures_seed)
        on_tenant_created(agent_demo_seed)
        register_fixture_source(fixture_workflow_ids)
        register_capability("agents", agents_capability)

        from apps.agents.services import a2a_tenants_pending, a2a_tenants_store
        from apps.core.sealing import SecretBound, secret_bound_register

        # Routing values peers hold, derived from SECRET_KEY until stored: `reseal` stores them.
        secret_bound_register(SecretBound("agent.a2a-tenant", a2a_tenants_pending, a2a_tenants_store))
