from django.apps import AppConfig


class AgentsConfig(AppConfig):
    name = "apps.agents"
    label = "agents"

    def ready(self) -> None:
        from apps.agents.fixtures import fixture_workflow_ids
        from apps.agents.services import workflow_fixtures_seed_for_tenant_pk
        from apps.facets.discovery import register_fixture_source
        from apps.tenants.hooks import on_tenant_created

        # Every tenant gets the fixture workflows: on creation, and again (idempotently) on seed_demo.
        on_tenant_created(workflow_fixtures_seed_for_tenant_pk)
        register_fixture_source(fixture_workflow_ids)
