from django.apps import AppConfig


class PushAppConfig(AppConfig):
    name = "apps.push"
    label = "push"

    def ready(self) -> None:
        from apps.facets.discovery import register_capability
        from apps.push import tasks  # noqa: F401 - registers push.deliver and the worker's sweeper
        from apps.push.capabilities import webhooks_capability

        register_capability("webhooks", webhooks_capability)
