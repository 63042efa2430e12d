from django.apps import AppConfig


class RetentionConfig(AppConfig):
    name = "apps.retention"
    label = "retention"

    def ready(self) -> None:
        from apps.core.discovery import register_extension
        from apps.core.metrics import on_scrape
        from apps.retention import tasks  # noqa: F401 - registers retention.apply for beat
        from apps.retention.capabilities import retention_advertised
        from apps.retention.services import retention_gauges

        register_extension("openwop-host.retention", retention_advertised)  # what is kept, how long
        on_scrape(retention_gauges)  # /metrics: the last pass and what it expired
