from django.apps import AppConfig


class RetentionConfig(AppConfig):
    name = "apps.retention"
    label = "retention"

    def ready(self) -> None:
        # The floors below never import this app: it hands them what they call (issue 35).
        from apps.core.discovery import register_extension
        from apps.core.metrics import on_scrape
        from apps.mcp.projection import on_task_ttl
        from apps.retention import tasks  # noqa: F401 - registers retention.apply for beat
        from apps.retention.capabilities import retention_advertised
        from apps.retention.services import arun_ttl_ms, retention_gauges, run_ttl_ms

        register_extension("openwop-host.retention", retention_advertised)  # what is kept, how long
        on_task_ttl(run_ttl_ms, arun_ttl_ms)  # an MCP task's ttlMs: the run retention
        on_scrape(retention_gauges)  # /metrics: the last pass and what it expired
