from django.apps import AppConfig


class MCPConfig(AppConfig):
    name = "apps.mcp"
    label = "mcp"
