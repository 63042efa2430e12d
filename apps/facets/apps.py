from django.apps import AppConfig


class FacetsConfig(AppConfig):
    name = "apps.facets"
    label = "facets"

    def ready(self) -> None:
        from apps.facets.capabilities import a2a_capability, mcp_capability
        from apps.facets.discovery import register_capability

        register_capability("a2a", a2a_capability)
        register_capability("mcp", mcp_capability)
