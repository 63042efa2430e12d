from django.apps import AppConfig


class FacetsConfig(AppConfig):
    name = "apps.facets"
    label = "facets"

    def ready(self) -> None:
        from apps.core.discovery import register_capability
        from apps.facets.capabilities import a2a_capability, mcp_capability, purpose_propagation_capability
        from apps.facets.services import facet_cached
        from apps.oauth.selectors import on_mcp_paths

        register_capability("a2a", a2a_capability)
        register_capability("mcp", mcp_capability)
        register_capability("purposePropagation", purpose_propagation_capability)
        on_mcp_paths(lambda: list(facet_cached(protocol="mcp").server_paths or ()))
