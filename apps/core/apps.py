from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "apps.core"
    label = "core"

    def ready(self) -> None:
        from apps.core.backfills import backfill_gauges
        from apps.core.discovery import register_extension
        from apps.core.egress import egress_relaxation
        from apps.core.jobs import job_gauges
        from apps.core.logformat import scope_stamping_install
        from apps.core.metrics import on_scrape
        from apps.core.queue_depth import queue_gauges
        from apps.core.request_limits import limits_advertised

        # DESIGN.md: an operator allowlist relaxes the guard, and discovery says so.
        register_extension("openwop-host.egress", egress_relaxation)
        register_extension("openwop-host.limits", limits_advertised)
        scope_stamping_install()  # log lines name the tenant, operation and ids of their scope
        on_scrape(backfill_gauges)  # /metrics: how far the post-deploy backfills have come
        on_scrape(job_gauges)  # /metrics: each beat job's last success and failure
        on_scrape(queue_gauges)  # /metrics: messages waiting per Celery queue
