from django.apps import AppConfig


class PushAppConfig(AppConfig):
    name = "apps.push"
    label = "push"

    def ready(self) -> None:
        from apps.core.discovery import register_capability
        from apps.core.metrics import on_scrape
        from apps.push import (
            services,
            tasks,  # noqa: F401 - registers push.deliver and the worker's sweeper
        )
        from apps.push.capabilities import webhooks_capability
        from apps.push.models import WebhookEvent
        from apps.push.selectors import push_backlog_gauges
        from apps.runs.log import on_events_written

        register_capability("webhooks", webhooks_capability)
        # The deliveries a run's events owe; a run nobody has seen yet has no push config of its
        # own, so only a webhook of its tenant's for one of the events' types can want them.
        table = WebhookEvent._meta.db_table
        owed = f"SELECT 1 FROM {table} WHERE tenant_id = {{tenant_id}} AND event_type = ANY({{types}})"  # noqa: S608
        on_events_written(services.push_deliveries_for_events, owed_probe=owed)
        on_scrape(push_backlog_gauges)  # /metrics' backlog gauges

        from apps.core.sealing import PUSH_CREDENTIALS, SealedField, sealed_field_register
        from apps.push.models import PushConfig, Webhook

        # What `reseal` and `doctor secrets` reach (apps/core/sealing.py).
        sealed_field_register(
            SealedField("push.credentials", PushConfig, "credentials_sealed", PUSH_CREDENTIALS, id_field="config_id")
        )
        sealed_field_register(
            SealedField("webhook.secret", Webhook, "secret_sealed", PUSH_CREDENTIALS, id_field="webhook_id")
        )
