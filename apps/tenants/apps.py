from django.apps import AppConfig


class TenantsConfig(AppConfig):
    name = "apps.tenants"
    label = "tenants"

    def ready(self) -> None:
        import apps.tenants.schema  # noqa: F401 - registers the OpenAPI auth extension
        from apps.core.discovery import register_capability
        from apps.tenants.capabilities import auth_capability

        register_capability("auth", auth_capability)

        from django.db.models.signals import post_migrate

        from apps.tenants.staff_roles import staff_roles_grant

        post_migrate.connect(staff_roles_grant, sender=self, dispatch_uid="tenants.staff_roles_grant")
