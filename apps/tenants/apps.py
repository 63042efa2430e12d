from django.apps import AppConfig


class TenantsConfig(AppConfig):
    name = "apps.tenants"
    label = "tenants"

    def ready(self) -> None:
        import apps.tenants.schema  # noqa: F401 - registers the OpenAPI auth extension
        from apps.facets.discovery import register_capability
        from apps.tenants.capabilities import auth_capability

        register_capability("auth", auth_capability)
